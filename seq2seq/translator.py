"""Text in, text out: a trained model with its tokenizer and decoding settings."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path

import torch

from .batching import pad, padding_mask
from .checkpoint import best_or_latest, load_weights
from .config import DecodeConfig, ModelConfig, load_run_config
from .errors import UserError
from .model import Transformer
from .runtime import autocast_dtype, resolve_device
from .search import greedy
from .tokenizer import EOS_ID, Tokenizer, load_tokenizer

log = logging.getLogger(__name__)


def build_model(cfg: ModelConfig, tokenizer: Tokenizer) -> Transformer:
    """The Transformer a model config describes, sized to the tokenizer's vocabularies."""
    return Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)


class Translator:
    """Translates lists of lines in length-sorted batches; one output per input, always."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device,
        amp_dtype: torch.dtype | None = None,
    ):
        self.model, self.tokenizer, self.decode = model, tokenizer, decode
        self.device, self.amp_dtype = device, amp_dtype
        self.max_src_len = model.cfg.max_positions

    def translate(self, lines: list[str]) -> list[str]:
        """Translate each line; empty (or blank) lines give empty outputs."""
        out = [""] * len(lines)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        ids = self.tokenizer.encode_src([lines[i].strip() for i in todo])
        for j, seq in enumerate(ids):
            if len(seq) > self.max_src_len:
                log.warning(
                    "input line %d has %d tokens; truncated to the model's maximum of %d",
                    todo[j] + 1,
                    len(seq),
                    self.max_src_len,
                )
                ids[j] = seq[: self.max_src_len - 1] + [EOS_ID]
        order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), self.decode.batch_size):
                chunk = order[start : start + self.decode.batch_size]
                hyps = self._decode_batch([ids[j] for j in chunk])
                for j, text in zip(chunk, hyps):
                    out[todo[j]] = " ".join(text.split())  # never a newline inside a line
        finally:
            self.model.train(was_training)
        return out

    def _decode_batch(self, ids: list[list[int]]) -> list[str]:
        src = pad(ids).to(self.device)
        amp = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else nullcontext()
        )
        with amp:
            out = greedy(
                self.model, src, padding_mask(src), self.decode.max_len_a, self.decode.max_len_b
            )
        return self.tokenizer.decode_tgt(out)


def load_translator(
    run_dir: Path,
    checkpoint: Path | None = None,
    device: str = "auto",
    batch_size: int | None = None,
) -> tuple[Translator, Path]:
    """A Translator for a run directory's best (else latest) or a given checkpoint."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    tokenizer = load_tokenizer(run_dir, cfg.tokenizer.joint)
    path = Path(checkpoint) if checkpoint else best_or_latest(run_dir)
    if path is None:
        raise UserError(f"{run_dir} has no checkpoint yet; train (or wait for the first save)")
    dev = resolve_device(device)
    model = build_model(cfg.model, tokenizer).to(dev)
    load_weights(model, path)
    model.eval()
    decode = (
        cfg.decode
        if batch_size is None
        else cfg.decode.model_copy(update={"batch_size": batch_size})
    )
    return Translator(model, tokenizer, decode, dev, autocast_dtype(dev, "auto")), path
