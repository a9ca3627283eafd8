"""SentencePiece tokenizer: fixed special ids, joint or separate vocabularies."""

from __future__ import annotations

import pytest

from seq2seq.config import TokenizerConfig
from seq2seq.data.tokenizer import EOS_ID, PAD_ID, load_tokenizer, train_tokenizer
from seq2seq.errors import UserError


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_joint_tokenizer_round_trips_text_and_ends_sources_with_eos(tmp_path, demo_pairs, kind):
    src = [a for a, _ in demo_pairs]
    tgt = [b for _, b in demo_pairs]
    tok = train_tokenizer(TokenizerConfig(type=kind, vocab_size=300), src, tgt, tmp_path)
    assert tok.joint and tok.src_vocab_size == tok.tgt_vocab_size
    ids = tok.encode_src([src[0]])[0]
    assert ids[-1] == EOS_ID and PAD_ID not in ids
    assert tok.decode_tgt(tok.encode_tgt([tgt[0]])) == [tgt[0]]
    # Decoding stops at EOS and ignores padding, as search output has both.
    assert tok.decode_tgt([tok.encode_tgt([tgt[0]])[0] + [EOS_ID, 9, PAD_ID]]) == [tgt[0]]


def test_separate_vocabularies_are_saved_and_reloaded(tmp_path, demo_pairs):
    src = [a for a, _ in demo_pairs]
    tgt = [b for _, b in demo_pairs]
    cfg = TokenizerConfig(vocab_size=200, joint=False)
    train_tokenizer(cfg, src, tgt, tmp_path)
    tok = load_tokenizer(tmp_path, joint=False)
    assert not tok.joint
    assert (tmp_path / "tokenizer" / "src.model").is_file()
    assert tok.decode_tgt(tok.encode_tgt([tgt[1]])) == [tgt[1]]


def test_missing_tokenizer_model_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="tokenizer model missing from the run directory"):
        load_tokenizer(tmp_path, joint=True)


def test_a_one_pair_tokenizer_takes_languages_but_its_ids_do_not_depend_on_them(
    tmp_path, demo_pairs
):
    src = [a for a, _ in demo_pairs]
    tgt = [b for _, b in demo_pairs]
    tok = train_tokenizer(TokenizerConfig(vocab_size=200), src, tgt, tmp_path)
    assert tok.languages == {}
    assert tok.encode_src(src[:2], "en", "fr") == tok.encode_src(src[:2])
    assert tok.encode_tgt(tgt[:2], "fr") == tok.encode_tgt(tgt[:2])
    assert tok.first_target_token("fr") is None  # nothing is forced


def test_a_one_pair_tokenizer_takes_its_own_languages_only(tmp_path, demo_pairs):
    src = [a for a, _ in demo_pairs]
    tok = train_tokenizer(TokenizerConfig(vocab_size=200), src, src, tmp_path)
    assert tok.check_languages((None, None), ("en", "fr")) == ("en", "fr")
    assert tok.check_languages(("en", "fr"), ("en", "fr")) == ("en", "fr")
    with pytest.raises(UserError, match="target language 'de': this model translates en → fr only"):
        tok.check_languages((None, "de"), ("en", "fr"))
