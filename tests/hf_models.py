"""Tiny Hugging Face models with random weights, saved as the hub holds them: MarianMTModels
with OPUS-MT-style tokenizer files (a SentencePiece model per language, one Marian vocab.json
with language codes), and M2M100 models with M2M100 or NLLB tokenizers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

SENTENCES = [
    "I have three cats.",
    "She was born on the first of May nineteen eighty.",
    ">>fr<< It is a quarter past five.",
    ">>es<<The book costs twelve euros.",
    "zzq ü </s> x ©",
    "  I have   seventy-one dogs.  ",
    "a<unk>b",
    "",
]
# (share source/target embeddings, tie the output layer, activation, final_logits_bias, weights,
# separate source and target vocabularies)
LAYOUTS = {
    "tied-swish-bias-safetensors": (True, True, "swish", True, "safetensors", False),
    "untied-relu-nobias-bin": (False, True, "relu", False, "bin", False),
    "untied-output-gelu-bias-safetensors": (False, False, "gelu", True, "safetensors", False),
    "separate-vocabularies-swish": (False, True, "swish", True, "safetensors", True),
}


def bpe_model(folder: Path, pairs: list[tuple[str, str]]) -> Path:
    """A 200-piece BPE SentencePiece model of both sides of `pairs`, as the hub's M2M100/NLLB
    tokenizers are built on."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for pair in pairs for t in pair]),
        model_prefix=str(folder / "sp"),
        model_type="bpe",
        vocab_size=200,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return folder / "sp.model"


def needs_transformers():
    """The transformers module, or a skip of the test asking: it is an optional dependency."""
    return pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install 'seq2seq[hf]')"
    )


def marian_vocab(models) -> dict[str, int]:
    """</s>=0, <unk>=1, the models' pieces, language codes, <pad> last (OPUS-MT's order)."""
    vocab = {"</s>": 0, "<unk>": 1}
    for sp in models:
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    for code in (">>fr<<", ">>es<<"):
        vocab[code] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def write_marian_tokenizer(folder: Path, pairs: list[tuple[str, str]]) -> Path:
    """MarianTokenizer files made the way OPUS-MT's are: a SentencePiece model per language,
    one vocab.json over both (in `saved`), or one per language (in `saved-separate`), in
    `folder`; returns `folder/saved`."""
    transformers = needs_transformers()
    models = {}
    for side, texts in (
        ("source", [a for a, _ in pairs]),
        ("target", [b for _, b in pairs]),
    ):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_prefix=str(folder / side),
            vocab_size=150,
            hard_vocab_limit=False,
            minloglevel=2,
        )
        models[side] = spm.SentencePieceProcessor(model_file=str(folder / f"{side}.model"))
    (folder / "vocab.json").write_text(json.dumps(marian_vocab(models.values())), "utf-8")
    files = [str(folder / "source.model"), str(folder / "target.model"), str(folder / "vocab.json")]
    tok = transformers.MarianTokenizer(*files, source_lang="en", target_lang="fr")
    tok.save_pretrained(folder / "saved")
    # Separate vocabularies: their special tokens (and so the model's special ids) agree.
    src_vocab, tgt_vocab = marian_vocab([models["source"]]), marian_vocab([models["target"]])
    pad_id = max(len(src_vocab), len(tgt_vocab)) - 1
    for vocab in (src_vocab, tgt_vocab):
        vocab.pop("<pad>")
        while len(vocab) < pad_id:
            vocab[f"<unused{len(vocab)}>"] = len(vocab)
        vocab["<pad>"] = pad_id
    (folder / "source_vocab.json").write_text(json.dumps(src_vocab), "utf-8")
    (folder / "target_vocab.json").write_text(json.dumps(tgt_vocab), "utf-8")
    tok = transformers.MarianTokenizer(
        *files[:2],
        str(folder / "source_vocab.json"),
        target_vocab_file=str(folder / "target_vocab.json"),
        separate_vocabs=True,
        source_lang="en",
        target_lang="fr",
    )
    tok.save_pretrained(folder / "saved-separate")
    return folder / "saved"


def save_marian(folder: Path, tokenizer: Path, layout: tuple, seed: int = 0):
    """A tiny random MarianMTModel saved with save_pretrained beside the tokenizer files."""
    transformers = needs_transformers()
    share, tie, activation, bias, weights, separate = layout
    if separate:
        tokenizer = tokenizer.with_name("saved-separate")
    vocab = len(json.loads((tokenizer / "vocab.json").read_text()))
    target_vocab = tokenizer / ("target_vocab.json" if separate else "vocab.json")
    pad_id = vocab - 1
    config = transformers.MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=len(json.loads(target_vocab.read_text())),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function=activation,
        scale_embedding=True,
        share_encoder_decoder_embeddings=share,
        tie_word_embeddings=tie,
        pad_token_id=pad_id,
        eos_token_id=0,
        decoder_start_token_id=pad_id,
        init_std=0.1,  # peaked enough that greedy choices are not near-ties
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    if bias:
        with torch.no_grad():
            model.final_logits_bias.normal_()
    model.save_pretrained(folder)
    if weights == "bin":
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    for path in tokenizer.iterdir():
        shutil.copyfile(path, folder / path.name)
    return model


def m2m100_tokenizer(sp_model: Path, folder: Path):
    """An M2M100Tokenizer: fairseq's four specials, then the pieces, in vocab.json."""
    transformers = needs_transformers()
    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab), "utf-8")
    tok = transformers.M2M100Tokenizer(
        vocab_file=str(folder / "vocab.json"), spm_file=str(sp_model), src_lang="en", tgt_lang="fr"
    )
    return tok


def nllb_tokenizer(sp_model: Path, folder: Path):
    """An NllbTokenizer converted from the SentencePiece model, with NLLB's language codes."""
    transformers = needs_transformers()
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    shutil.copyfile(sp_model, folder / "sentencepiece.bpe.model")
    config = {
        "tokenizer_class": "NllbTokenizer",
        "src_lang": "eng_Latn",
        "tgt_lang": "fra_Latn",
        "additional_special_tokens": FAIRSEQ_LANGUAGE_CODES,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return transformers.AutoTokenizer.from_pretrained(folder)


def save_m2m100(
    folder: Path, family: str, sp_model: Path, *, weights: str = "safetensors", tied: bool = False
):
    """A tiny random M2M100ForConditionalGeneration and its tokenizer, as save_pretrained
    writes them (NLLB's folder also gets sentencepiece.bpe.model, as the hub's have)."""
    transformers = needs_transformers()
    folder.mkdir(parents=True)
    build = folder.with_name(folder.name + "-tok")
    build.mkdir()
    tok = (m2m100_tokenizer if family == "m2m100" else nllb_tokenizer)(sp_model, build)
    size = len(tok)
    if family == "m2m100":  # as facebook/m2m100_418M: pieces, languages, 8 made-up words
        size = tok.vocab_size + len(tok.lang_code_to_id) + tok.num_madeup_words
    config = transformers.M2M100Config(
        vocab_size=size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        scale_embedding=True,
        dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        init_std=0.2,  # peaked enough that greedy choices are not near-ties
        tie_word_embeddings=tied,
    )
    torch.manual_seed(3)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        if tied:  # the released checkpoints' layout: one matrix in, out and on both sides
            return _saved(model, tok, folder, family, sp_model, weights)
        # EOS scores peak near position 12, so sentences end within the cap (where both
        # searches agree on ending) at lengths of their own, not in a random model's loops.
        table = model.model.decoder.embed_positions.get_embedding(16, 32, config.pad_token_id)
        model.lm_head.weight[config.eos_token_id] = 0.8 * table[14]
    return _saved(model, tok, folder, family, sp_model, weights)


def _saved(model, tok, folder: Path, family: str, sp_model: Path, weights: str):
    model.save_pretrained(folder)
    if weights == "bin":  # transformers 5 writes safetensors only; older releases wrote this
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    tok.save_pretrained(folder)
    if family == "nllb":
        shutil.copyfile(sp_model, folder / "sentencepiece.bpe.model")
    return model, tok
