"""Text in, text out: a trained model with its tokenizer and decoding settings."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path

import torch

from .batching import pad, padding_mask
from .checkpoint import best_or_latest, load_weights
from .config import DecodeConfig, ModelConfig, load_run_config, with_changes
from .errors import UserError
from .model import Transformer
from .runtime import autocast_dtype, resolve_device
from .search import SearchError, beam_search, greedy
from .tokenizer import EOS_ID, Tokenizer, load_tokenizer

log = logging.getLogger(__name__)


def build_model(cfg: ModelConfig, tokenizer: Tokenizer) -> Transformer:
    """The Transformer a model config describes, sized to the tokenizer's vocabularies."""
    return Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)


class Translator:
    """Translates lists of lines in length-sorted batches; one result per input, always."""

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
        """The best translation of each line; empty (or blank) lines give empty outputs."""
        return [best[0][0] for best in self.translate_nbest(lines)]

    def translate_nbest(self, lines: list[str]) -> list[list[tuple[str, float]]]:
        """The `decode.nbest` best (text, score) pairs of each line, best first."""
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
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
        was_training = self.model.training
        self.model.eval()
        try:
            for chunk in self._batches(ids):
                try:
                    results = self._decode_batch([ids[j] for j in chunk])
                except SearchError as e:
                    lines = ", ".join(str(todo[chunk[i]] + 1) for i in e.sentences)
                    raise UserError(
                        f"the model's scores are not finite (NaN or infinite) for input line(s) "
                        f"{lines}: no translation; is the checkpoint damaged?"
                    ) from None
                for j, hyps in zip(chunk, results):
                    out[todo[j]] = hyps
        finally:
            self.model.train(was_training)
        return out

    def _batches(self, ids: list[list[int]]) -> list[list[int]]:
        """Indices in length order, cut by `batch_size` sentences and `max_tokens` tokens."""
        order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
        batches, current, longest = [], [], 0
        budget = self.decode.max_tokens
        for j in order:
            grown = max(longest, len(ids[j]))
            full = len(current) >= self.decode.batch_size or (
                budget is not None and (len(current) + 1) * grown > budget
            )
            if current and full:
                batches.append(current)
                current, grown = [], len(ids[j])
            current.append(j)
            longest = grown
        if current:
            batches.append(current)
        return batches

    def _decode_batch(self, ids: list[list[int]]) -> list[list[tuple[str, float]]]:
        src = pad(ids).to(self.device)
        amp = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else nullcontext()
        )
        d = self.decode
        with amp:
            if d.beam_size == 1:
                found = greedy(
                    self.model,
                    src,
                    padding_mask(src),
                    d.max_len_a,
                    d.max_len_b,
                    d.length_penalty,
                    d.length_norm,
                )
                nbest = [[h] for h in found]
            else:
                nbest = beam_search(
                    self.model,
                    src,
                    padding_mask(src),
                    d.beam_size,
                    d.max_len_a,
                    d.max_len_b,
                    d.length_penalty,
                    d.nbest,
                    d.length_norm,
                )
        texts = self.tokenizer.decode_tgt([h.tokens for hyps in nbest for h in hyps])
        out, at = [], 0
        for hyps in nbest:
            # Never a newline inside an output line.
            out.append([(" ".join(t.split()), h.score) for t, h in zip(texts[at:], hyps)])
            at += len(hyps)
        return out


def load_translator(
    run_dir: Path,
    checkpoint: Path | None = None,
    device: str = "auto",
    decode_overrides: dict | None = None,
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
    decode = with_changes(cfg.decode, decode_overrides or {})
    return Translator(model, tokenizer, decode, dev, autocast_dtype(dev, "auto")), path
