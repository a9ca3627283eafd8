"""Tiny models and translators the tests build: one shape, changed, sized and seeded per test."""

from __future__ import annotations

from pathlib import Path

import torch

from seq2seq.config import (
    CONFIG_NAME,
    Config,
    DecodeConfig,
    ModelConfig,
    TokenizerConfig,
    load_config,
    save_config,
)
from seq2seq.data.corpus import prepare_data
from seq2seq.data.tokenizer import Tokenizer, train_tokenizer
from seq2seq.decode.translator import Translator
from seq2seq.model.transformer import Transformer, Vocabulary, build_model
from seq2seq.run.checkpoint import save_checkpoint
from tests.runs import write_pairs_config, write_tiny_config

# Two layers each side of four heads: big enough for every code path, milliseconds to run.
TINY_MODEL = {
    "d_model": 32,
    "heads": 4,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "ffn_dim": 64,
    "dropout": 0.0,
    "max_positions": 64,
}


def tiny_shape(**changes) -> ModelConfig:
    """The tiny model shape with `changes` applied."""
    return ModelConfig(**{**TINY_MODEL, **changes})


def tiny_model(
    cfg: ModelConfig | None = None,
    vocab: int = 40,
    tgt_vocab: int | None = None,
    *,
    seed: int | None = None,
) -> Transformer:
    """A random model of `cfg` (else the tiny shape) over `vocab` ids, one vocabulary for both
    sides unless `tgt_vocab` is given; `seed` seeds torch first."""
    if seed is not None:
        torch.manual_seed(seed)
    joint = tgt_vocab is None
    sizes = Vocabulary(vocab, vocab if joint else tgt_vocab, joint)
    return build_model(cfg or tiny_shape(), sizes)


def tiny_translator(
    folder: Path,
    pairs: list[tuple[str, str]],
    decode: DecodeConfig,
    max_positions: int = 64,
) -> Translator:
    """An untrained one-layer model on CPU, with a 150-piece tokenizer trained on `pairs` in
    `folder`: real pieces and real search, output that babbles."""
    tokenizer = train_tokenizer(
        TokenizerConfig(vocab_size=150), [a for a, _ in pairs], [b for _, b in pairs], folder
    )
    cfg = tiny_shape(encoder_layers=1, decoder_layers=1, max_positions=max_positions)
    torch.manual_seed(0)
    model = build_model(cfg, tokenizer).eval()
    return Translator(model, tokenizer, decode, torch.device("cpu"))


def untrained_run(folder: Path, pairs: list[tuple[str, str]], **sections) -> Path:
    """A run directory without training: the tiny config (these keys changed), a tokenizer
    trained on `pairs` and a random model, its output sharpened so that greedy choices are not
    near-ties, saved as the step-0 checkpoint. What reads a run, read in milliseconds."""
    cfg = load_config(write_tiny_config(folder, pairs, **sections))
    tokenizer = train_tokenizer(
        cfg.tokenizer, [a for a, _ in pairs], [b for _, b in pairs], cfg.run_dir
    )
    return _save_untrained(cfg, tokenizer)


def untrained_pairs_run(folder: Path, demo_pairs: list[tuple[str, str]], how: str) -> Path:
    """`write_pairs_config`'s en→fr and fr→en run without training: its data prepared (the
    tokenizer with its language tags trained), a random model saved as the step-0 checkpoint."""
    cfg = load_config(write_pairs_config(folder, demo_pairs, how))
    return _save_untrained(cfg, prepare_data(cfg, reuse_tokenizer=False).tokenizer)


def _save_untrained(cfg: Config, tokenizer: Tokenizer) -> Path:
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer)
    with torch.no_grad():
        model.output.weight.mul_(4.0)
    save_config(cfg, cfg.run_dir / CONFIG_NAME)
    save_checkpoint(cfg.run_dir, 0, model, {"train": {"step": 0}})
    return cfg.run_dir
