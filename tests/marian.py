"""Tiny MarianMTModels with random weights and OPUS-MT-style tokenizer files (a SentencePiece
model per language, one Marian vocab.json with language codes), saved as the hub holds them."""

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
