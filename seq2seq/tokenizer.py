"""SentencePiece tokenizer: trained once from the training split, stored in the run directory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm

from .config import TokenizerConfig
from .errors import UserError

# Fixed for every vocabulary so the model, batching and search agree without passing them around.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_IDS = frozenset((PAD_ID, BOS_ID, EOS_ID))

TOKENIZER_DIR = "tokenizer"


class Tokenizer:
    """Source and target SentencePiece models (one shared model when the vocabulary is joint)."""

    def __init__(self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor):
        self.src = src
        self.tgt = tgt

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, texts: list[str]) -> list[list[int]]:
        """Source ids, each sentence ending with EOS."""
        return [ids + [EOS_ID] for ids in self.src.encode(texts, out_type=int)]

    def encode_tgt(self, texts: list[str]) -> list[list[int]]:
        """Target ids without BOS/EOS (batching adds them to make decoder input and output)."""
        return self.tgt.encode(texts, out_type=int)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Text from target ids, stopping at EOS and skipping padding."""
        return self.tgt.decode([_strip_special(seq) for seq in ids])


def _strip_special(ids: list[int]) -> list[int]:
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i not in SPECIAL_IDS:
            out.append(i)
    return out


def model_paths(run_dir: Path, joint: bool) -> tuple[Path, Path]:
    """Paths of the source and target SentencePiece models inside a run directory."""
    folder = Path(run_dir) / TOKENIZER_DIR
    if joint:
        return folder / "spm.model", folder / "spm.model"
    return folder / "src.model", folder / "tgt.model"


def load_tokenizer(run_dir: Path, joint: bool) -> Tokenizer:
    """Load the tokenizer stored in a run directory."""
    src_path, tgt_path = model_paths(run_dir, joint)
    for p in {src_path, tgt_path}:
        if not p.is_file():
            raise UserError(f"tokenizer model missing from the run directory: {p}")
    src = _load(src_path)
    return Tokenizer(src, src if joint else _load(tgt_path))


def _load(path: Path) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        raise UserError(f"cannot load tokenizer model {path}: {e}") from None
    if (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
        raise UserError(f"{path}: special token ids differ from pad=0 bos=1 eos=2 unk=3")
    return sp


def train_tokenizer(
    cfg: TokenizerConfig,
    src_texts: Iterable[str],
    tgt_texts: Iterable[str],
    run_dir: Path,
    threads: int = 1,
) -> Tokenizer:
    """Train SentencePiece on the training texts and save it in the run directory."""
    src_path, tgt_path = model_paths(run_dir, cfg.joint)
    src_path.parent.mkdir(parents=True, exist_ok=True)
    if cfg.joint:
        _train(cfg, _chain(src_texts, tgt_texts), src_path, threads)
    else:
        _train(cfg, iter(src_texts), src_path, threads)
        _train(cfg, iter(tgt_texts), tgt_path, threads)
    return load_tokenizer(run_dir, cfg.joint)


def _chain(a: Iterable[str], b: Iterable[str]) -> Iterator[str]:
    yield from a
    yield from b


def _train(cfg: TokenizerConfig, texts: Iterator[str], out: Path, threads: int) -> None:
    # Train into a temporary prefix and move into place, so a crash never leaves half a model.
    with tempfile.TemporaryDirectory(prefix=".spm-train-", dir=out.parent) as tmp:
        prefix = os.path.join(tmp, "spm")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=(t for t in texts if t),
                model_prefix=prefix,
                model_type=cfg.type,
                vocab_size=cfg.vocab_size,
                character_coverage=cfg.character_coverage,
                input_sentence_size=cfg.max_sentences,
                shuffle_input_sentence=True,
                # A small corpus may not support the requested size; take what it supports.
                hard_vocab_limit=False,
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                num_threads=threads,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise UserError(f"SentencePiece training failed: {e}") from None
        os.replace(prefix + ".model", out)
        os.replace(prefix + ".vocab", out.with_suffix(".vocab"))
