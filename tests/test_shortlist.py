"""The lexical shortlist: built from a corpus, a batch's rows the union of its tokens' lists,
decoding over those rows only, refused for another vocabulary, and its CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq.config import DecodeConfig, TokenizerConfig
from seq2seq.data.batching import pad
from seq2seq.data.tokenizer import DEFAULT_IDS, EOS_ID, train_tokenizer
from seq2seq.decode import shortlist as shortlist_module
from seq2seq.decode.search import decode
from seq2seq.decode.segments import flatten
from seq2seq.decode.shortlist import (
    FILE_NAME,
    Shortlist,
    build_run_shortlist,
    build_shortlist,
    load_shortlist,
    save_shortlist,
)
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.model.quantize import quantize_int8
from tests.factories import tiny_model, tiny_shape, untrained_pairs_run, untrained_run
from tests.runs import cli, write_parallel

VOCAB = 40


def _shortlist(table: list[list[int]], always: list[int], tgt_size: int = VOCAB) -> Shortlist:
    return Shortlist(torch.tensor(table), torch.tensor(always), tgt_size, "test")


def _sources(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (4,), generator=g).tolist()
    return pad([torch.randint(4, VOCAB, (n,), generator=g).tolist() + [EOS_ID] for n in lengths])


def _model(seed: int, **shape):
    model = tiny_model(tiny_shape(**shape), VOCAB, seed=seed).eval()
    with torch.no_grad():  # sharpen the output so that greedy choices are not near-ties
        model.output.weight.mul_(4.0)
    return model


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, demo_pairs):
    folder = tmp_path_factory.mktemp("shortlist-tokenizer")
    pairs = demo_pairs[:300]
    config = TokenizerConfig(vocab_size=150)
    return train_tokenizer(config, [a for a, _ in pairs], [b for _, b in pairs], folder)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory, demo_pairs) -> Path:
    return untrained_run(tmp_path_factory.mktemp("shortlist-run"), demo_pairs[:300])


def test_rows_are_the_union_of_the_batch_tokens_lists_and_the_always_kept_ids():
    table = [[EOS_ID] * 2 for _ in range(8)]
    table[4], table[5], table[6] = [10, 11], [11, 12], [30, EOS_ID]
    shortlist = _shortlist(table, [EOS_ID, 3, 20])
    src = torch.tensor([[4, 5, EOS_ID], [5, EOS_ID, 0]])
    assert shortlist.rows(src).tolist() == [EOS_ID, 3, 10, 11, 12, 20]
    assert shortlist.rows(src, extra=torch.tensor([35])).tolist() == [EOS_ID, 3, 10, 11, 12, 20, 35]
    assert 30 in shortlist.rows(torch.tensor([[6]])).tolist()


def test_a_built_shortlist_holds_the_reference_tokens_of_its_training_pairs(tokenizer, demo_pairs):
    pairs = demo_pairs[:300]
    shortlist = build_shortlist(tokenizer, (a for a, _ in pairs), (b for _, b in pairs), 50, 20)
    assert shortlist.k == 50 and shortlist.always.numel() >= 20
    assert {tokenizer.ids.eos, tokenizer.ids.unk} <= set(shortlist.always.tolist())
    for src, tgt in zip(
        tokenizer.encode_src([a for a, _ in pairs]), tokenizer.encode_tgt([b for _, b in pairs])
    ):
        rows = set(shortlist.rows(torch.tensor([src])).tolist())
        assert set(tgt) <= rows
        assert len(rows) < tokenizer.tgt_vocab_size  # a shortlist, not the vocabulary


def test_a_source_words_translation_outranks_the_words_of_every_sentence(tokenizer):
    # "chat" comes with "cat" only; "le" and "." come with everything: Dice lists "chat" first.
    src = ["the cat .", "the dog .", "the house .", "a cat ."] * 5
    tgt = ["le chat .", "le chien .", "la maison .", "un chat ."] * 5
    shortlist = build_shortlist(tokenizer, src, tgt, k=1, frequent=0)
    (cat,) = [i for i in tokenizer.encode_src(["cat"])[0] if i != tokenizer.ids.eos][-1:]
    chat = tokenizer.encode_tgt(["chat"])[0][-1]
    assert shortlist.table[cat].tolist() == [chat]


@pytest.mark.parametrize("beam", [1, 3])
def test_a_shortlist_of_every_token_decodes_as_the_whole_vocabulary(beam):
    model, src = _model(1), _sources(2)
    options = DecodeConfig(beam_size=beam, nbest=beam, max_len_a=0.0, max_len_b=10)
    whole = decode(model, src, options)
    listed = decode(model, src, options, rows=torch.arange(VOCAB))
    assert [[h.tokens for h in hyps] for hyps in listed] == [
        [h.tokens for h in hyps] for hyps in whole
    ]
    assert [h.score for hyps in listed for h in hyps] == pytest.approx(
        [h.score for hyps in whole for h in hyps], abs=1e-5
    )


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_over_rows_is_decoding_with_every_other_token_masked(beam):
    """Rows [N, R] map back to ids: the same outputs and scores as the whole vocabulary with
    the other tokens' logits at -inf (the normaliser then runs over the rows in both)."""
    model, src = _model(3, final_logits_bias=True), _sources(4)
    rows = torch.tensor([EOS_ID, 5, 6, 9, 12, 13, 17, 22, 23, 30, 31, 38])
    with torch.no_grad():
        model.final_logits_bias.fill_(-torch.inf)
        model.final_logits_bias[rows] = 0.0
    first = torch.tensor([12, 30, 5, 22])
    options = DecodeConfig(beam_size=beam, nbest=beam, max_len_a=0.0, max_len_b=10)
    masked = decode(model, src, options, first=first)
    listed = decode(model, src, options, first=first, rows=rows)
    assert [[h.tokens for h in hyps] for hyps in listed] == [
        [h.tokens for h in hyps] for hyps in masked
    ]
    assert all(set(h.tokens) <= set(rows.tolist()) for hyps in listed for h in hyps)
    assert [h.score for hyps in listed for h in hyps] == pytest.approx(
        [h.score for hyps in masked for h in hyps], abs=1e-5
    )


def test_a_saved_shortlist_loads_back_for_its_own_vocabulary(tokenizer, demo_pairs, tmp_path):
    pairs = demo_pairs[:100]
    built = build_shortlist(tokenizer, [a for a, _ in pairs], [b for _, b in pairs], k=7)
    assert save_shortlist(tmp_path, built) == tmp_path / FILE_NAME
    loaded = load_shortlist(tmp_path, tokenizer)
    assert torch.equal(loaded.table, built.table) and torch.equal(loaded.always, built.always)


def test_a_shortlist_built_for_another_vocabulary_is_refused(tokenizer, demo_pairs, tmp_path):
    pairs = demo_pairs[:100]
    other = train_tokenizer(
        TokenizerConfig(vocab_size=120), [a for a, _ in pairs], [b for _, b in pairs], tmp_path
    )
    save_shortlist(tmp_path, build_shortlist(other, [a for a, _ in pairs], [b for _, b in pairs]))
    with pytest.raises(UserError, match="built for another vocabulary"):
        load_shortlist(tmp_path, tokenizer)


def test_parallel_text_of_different_lengths_is_refused(tokenizer):
    with pytest.raises(UserError, match="differ in length: the target has more than 2 lines"):
        build_shortlist(tokenizer, ["a", "b"], ["a", "b", "c"])


def test_the_shortlist_flag_without_a_stored_shortlist_is_one_clear_error(untrained, tmp_path):
    (tmp_path / "in.en").write_text("I have three cats.\n")
    result = cli(
        "translate", "--run", untrained, "--shortlist", "--input", tmp_path / "in.en", code=1
    )
    assert "has no shortlist" in result.output and "seq2seq shortlist --run" in result.output
    assert "Traceback" not in result.output


def test_the_shortlist_command_writes_one_that_translate_evaluate_and_load_use(
    untrained, demo_pairs, tmp_path
):
    src, tgt = write_parallel(tmp_path, "corpus", demo_pairs[:300])
    result = cli("shortlist", "--run", untrained, "--src", src, "--tgt", tgt, "--k", 20)
    assert (untrained / FILE_NAME).is_file() and "written to" in result.output
    test_src, test_ref = write_parallel(tmp_path, "test", demo_pairs[300:310])
    plain = cli("translate", "--run", untrained, "--input", test_src, "--beam-size", 1)
    listed = cli(
        "translate", "--run", untrained, "--input", test_src, "--beam-size", 1, "--shortlist"
    )
    assert len(listed.output.splitlines()) == len(plain.output.splitlines()) == 10
    scored = cli(
        "evaluate", "--run", untrained, "--src", test_src, "--ref", test_ref, "--shortlist",
        "--output-dir", tmp_path / "eval",
    )  # fmt: skip
    assert "BLEU = " in scored.output
    translator, _ = load_translator(untrained, device="cpu", shortlist=True)
    assert translator.shortlist is not None and translator.shortlist.k == 20


def test_a_constrained_batch_decodes_over_the_whole_vocabulary(untrained, demo_pairs, tmp_path):
    src, tgt = write_parallel(tmp_path, "corpus", demo_pairs[:300])
    cli("shortlist", "--run", untrained, "--src", src, "--tgt", tgt, "--k", 1, "--frequent", 0)
    options = DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=8)
    translator, _ = load_translator(untrained, device="cpu", decode=options, shortlist=True)
    plain, _ = load_translator(untrained, device="cpu", decode=options)
    line, terms = ["I have three cats."], [["maison"]]
    assert translator.translate(line, terms) == plain.translate(line, terms)


def test_the_never_generated_ids_stay_out_of_a_built_shortlist(tokenizer, demo_pairs):
    pairs = demo_pairs[:100]
    built = build_shortlist(tokenizer, [a for a, _ in pairs], [b for _, b in pairs])
    listed = set(built.table.unique().tolist()) | set(built.always.tolist())
    assert not listed & set(DEFAULT_IDS.never_generated)


def test_an_int8_output_layer_decodes_over_rows_as_over_the_whole_vocabulary():
    model, src = quantize_int8(_model(5)), _sources(6)
    options = DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=10)
    whole = decode(model, src, options)
    listed = decode(model, src, options, rows=torch.arange(VOCAB))
    assert [h[0].tokens for h in listed] == [h[0].tokens for h in whole]


def test_a_many_language_runs_forced_language_tags_stay_reachable(tmp_path, demo_pairs):
    run = untrained_pairs_run(tmp_path, demo_pairs, "forced_first")
    src, tgt = write_parallel(tmp_path, "corpus", demo_pairs[:300])
    build_run_shortlist(run, src, tgt, k=3, frequent=3)
    options = DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=6)
    translator, _ = load_translator(run, device="cpu", decode=options, shortlist=True)
    assert {4, 5} <= set(translator.shortlist.always.tolist())  # >>en<< and >>fr<<
    for src_lang, tgt_lang, tag in (("en", "fr", 5), ("fr", "en", 4)):
        sources = translator.prepare(["le chat"], src_lang=src_lang, tgt_lang=tgt_lang)
        (hyps,) = translator.search(flatten(sources))
        assert hyps[0].tokens[0] == tag


def test_counting_past_its_pair_budget_keeps_each_source_tokens_best_pairs(
    tokenizer, demo_pairs, monkeypatch
):
    src, tgt = [a for a, _ in demo_pairs[:600]], [b for _, b in demo_pairs[:600]]
    whole = build_shortlist(tokenizer, src, tgt, k=5, frequent=0)
    monkeypatch.setattr(shortlist_module, "MAX_PAIRS", 1500)  # 10 pairs a source, pruned often
    monkeypatch.setattr(shortlist_module, "CHUNK", 50)
    pruned = build_shortlist(tokenizer, src, tgt, k=5, frequent=0)
    seen = [s for s in range(tokenizer.src_vocab_size) if whole.table[s].ne(EOS_ID).any()]
    same = [len(set(whole.table[s].tolist()) & set(pruned.table[s].tolist())) for s in seen]
    assert sum(same) / (5 * len(seen)) > 0.8  # lossy: a pair pruned early restarts from 0
