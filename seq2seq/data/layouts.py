"""Tokenizer layouts, one row each (as model.ARCHITECTURES holds architectures): the files a
run directory's tokenizer is made of and how it loads. `tokenizer.layout` in the config names
the row; a new layout (another toolkit's vocabulary files) is one more row here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.config import TokenizerConfig
from seq2seq.data import multilingual
from seq2seq.data.tokenizer import (
    MARIAN_FILES,
    MARIAN_TARGET_VOCAB,
    TOKENIZER_DIR,
    SpecialIds,
    Tokenizer,
    load_marian_tokenizer,
    load_tokenizer,
    model_paths,
)
from seq2seq.errors import UserError


@dataclass(frozen=True)
class Layout:
    """How a run directory holds one kind of tokenizer."""

    files: Callable[[Path, TokenizerConfig], list[Path]]  # (run dir, config) -> files
    load: Callable[[Path, TokenizerConfig], Tokenizer]  # (run dir, config) -> tokenizer


def _sentencepiece_files(run_dir: Path, cfg: TokenizerConfig) -> list[Path]:
    return sorted(set(model_paths(run_dir, cfg.joint)))


def _load_sentencepiece(run_dir: Path, cfg: TokenizerConfig) -> Tokenizer:
    tokenizer = load_tokenizer(run_dir, cfg.joint, SpecialIds.of(cfg))
    if cfg.languages:  # trained here for several pairs: its language tags are atomic pieces
        return multilingual.tagged_tokenizer(tokenizer.src, cfg)
    return tokenizer


def _marian_files(run_dir: Path, cfg: TokenizerConfig) -> list[Path]:
    extra = [] if cfg.joint else [MARIAN_TARGET_VOCAB]
    return [Path(run_dir) / TOKENIZER_DIR / name for name in (*MARIAN_FILES, *extra)]


def _load_marian(run_dir: Path, cfg: TokenizerConfig) -> Tokenizer:
    return load_marian_tokenizer(Path(run_dir) / TOKENIZER_DIR, SpecialIds.of(cfg), cfg.joint)


def _load_language(run_dir: Path, cfg: TokenizerConfig) -> Tokenizer:
    return multilingual.load_language_tokenizer(Path(run_dir) / TOKENIZER_DIR, cfg)


_LANGUAGES = Layout(multilingual.tokenizer_files, _load_language)
LAYOUTS: dict[str, Layout] = {
    "sentencepiece": Layout(_sentencepiece_files, _load_sentencepiece),
    "marian": Layout(_marian_files, _load_marian),
    "m2m100": _LANGUAGES,  # fairseq's ids: sentencepiece.bpe.model + vocab.json
    "nllb": _LANGUAGES,  # sentencepiece.bpe.model, ids by a fixed offset
}


def tokenizer_files(run_dir: Path, cfg: TokenizerConfig) -> list[Path]:
    """The files a run directory's tokenizer is made of."""
    return LAYOUTS[cfg.layout].files(Path(run_dir), cfg)


def load_run_tokenizer(run_dir: Path, cfg: TokenizerConfig) -> Tokenizer:
    """The tokenizer a run directory holds, as its config describes it."""
    for p in tokenizer_files(run_dir, cfg):
        if not p.is_file():
            raise UserError(f"tokenizer model missing from the run directory: {p}")
    return LAYOUTS[cfg.layout].load(Path(run_dir), cfg)
