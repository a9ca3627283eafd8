"""Text in, text out: a trained model with its tokenizer and decoding settings."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from .batching import pad
from .config import DecodeConfig, load_run_config
from .errors import UserError
from .model import Transformer
from .quantize import int8_device, quantize_int8
from .rundir import load_run
from .runtime import autocast_dtype, resolve_device
from .search import Hypothesis, SearchError, decode, length_penalty
from .sentences import split_sentences
from .tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """One input line ready to decode: the token ids of each of its sentences (none for a
    blank line), each ending with EOS."""

    segments: tuple[tuple[int, ...], ...]

    @property
    def tokens(self) -> int:
        """Source tokens, EOS included."""
        return sum(len(seq) for seq in self.segments)


class Translator:
    """Translates lists of lines in length-sorted batches; one result per input, always.

    With `decode.split_sentences`, a line of several sentences is decoded sentence by sentence
    and its translations joined (their tokens concatenated, so the target SentencePiece model
    puts the space between them).
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device,
        *,
        amp_dtype: torch.dtype | None = None,
        src_lang: str = "en",
    ):
        self.model, self.tokenizer, self.decode = model, tokenizer, decode
        self.device, self.amp_dtype, self.src_lang = device, amp_dtype, src_lang
        self.max_src_len = model.cfg.max_positions

    def translate(self, lines: list[str]) -> list[str]:
        """The best translation of each line; empty (or blank) lines give empty outputs."""
        return [best[0][0] for best in self.translate_nbest(lines)]

    def translate_nbest(self, lines: list[str]) -> list[list[tuple[str, float]]]:
        """The `decode.nbest` best (text, score) pairs of each line, best first.

        An n-best list (nbest > 1) is of whole lines: such lines are never split.
        """
        return self.translate_sources(self.prepare(lines))

    def prepare(self, lines: list[str], options: DecodeConfig | None = None) -> list[Source]:
        """Each line split into sentences (as `options`, default `decode`, say) and encoded,
        truncated to the model's positions; a blank line has no segments."""
        options = options or self.decode
        split = options.split_sentences and options.nbest == 1
        segments, owner = [], []  # what is decoded, and the line each piece belongs to
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            parts = split_sentences(line.strip(), self.src_lang) if split else [line]
            segments += [p.strip() for p in parts]
            owner += [i] * len(parts)
        pieces: list[list[tuple[int, ...]]] = [[] for _ in lines]
        for i, seq in zip(owner, self._encode(segments, owner)):
            pieces[i].append(tuple(seq))
        return [Source(tuple(p)) for p in pieces]

    def translate_sources(self, sources: list[Source]) -> list[list[tuple[str, float]]]:
        """`translate_nbest` of lines already prepared (split and encoded)."""
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sources]
        ids, owner = [], []  # what is decoded, and the line each piece belongs to
        for i, source in enumerate(sources):
            ids += [list(seq) for seq in source.segments]
            owner += [i] * len(source.segments)
        found = self._search(ids, owner)
        by_line: dict[int, list[list[Hypothesis]]] = {}
        for i, hyps in zip(owner, found):
            by_line.setdefault(i, []).append(hyps)
        alpha, norm = self.decode.length_penalty, self.decode.length_norm
        for i, pieces in by_line.items():
            hyps = pieces[0] if len(pieces) == 1 else [_joined([p[0] for p in pieces], alpha, norm)]
            texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
            # Never a newline inside an output line.
            out[i] = [(" ".join(t.split()), h.score) for t, h in zip(texts, hyps)]
        return out

    def _encode(self, segments: list[str], owner: list[int]) -> list[list[int]]:
        """Source ids of each segment, cut to the model's maximum (`owner`: input line
        indices, for the warning)."""
        ids = self.tokenizer.encode_src(segments) if segments else []
        for j, seq in enumerate(ids):
            if len(seq) > self.max_src_len:
                log.warning(
                    "input line %d has %d tokens; truncated to the model's maximum of %d",
                    owner[j] + 1,
                    len(seq),
                    self.max_src_len,
                )
                ids[j] = seq[: self.max_src_len - 1] + [self.tokenizer.ids.eos]
        return ids

    def search(self, ids: list[list[int]], owner: list[int]) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each encoded segment (`owner`: its input line index)."""
        return self._search(ids, owner)

    def batches(self, ids: list[list[int]]) -> list[list[int]]:
        """Indices of `ids` in the length-sorted batches they are decoded in."""
        return self._batches(ids)

    def _search(self, ids: list[list[int]], owner: list[int]) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each segment (`owner`: input line indices, for messages)."""
        found: list[list[Hypothesis]] = [[] for _ in ids]
        was_training = self.model.training
        self.model.eval()
        try:
            for chunk in self._batches(ids):
                try:
                    results = self._decode_batch([ids[j] for j in chunk])
                except SearchError as e:
                    bad = sorted({owner[chunk[i]] + 1 for i in e.sentences})
                    raise UserError(
                        f"the model's scores are not finite (NaN or infinite) for input line(s) "
                        f"{', '.join(map(str, bad))}: no translation; is the checkpoint damaged?"
                    ) from None
                for j, hyps in zip(chunk, results):
                    found[j] = hyps
        finally:
            self.model.train(was_training)
        return found

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

    def _decode_batch(self, ids: list[list[int]]) -> list[list[Hypothesis]]:
        special = self.tokenizer.ids
        src = pad(ids, pad_id=special.pad).to(self.device)
        amp = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else nullcontext()
        )
        with amp:
            return decode(self.model, src, self.decode, special=special)


def _joined(hyps: list[Hypothesis], alpha: float, norm: str) -> Hypothesis:
    """One hypothesis of a line from those of its sentences: tokens in order, log-probabilities
    summed, scored with the length penalty of the whole (each sentence's EOS counted)."""
    tokens = [t for h in hyps for t in h.tokens]
    log_prob = sum(h.log_prob for h in hyps)
    length = sum(len(h.tokens) + 1 for h in hyps)
    return Hypothesis(tokens, log_prob / length_penalty(length, alpha, norm), log_prob)


def load_translator(
    run_dir: Path,
    checkpoint: Path | None = None,
    device: str = "auto",
    *,
    decode: DecodeConfig | None = None,
) -> tuple[Translator, Path]:
    """A Translator for a run directory's best (else latest) or a given checkpoint, decoding
    with `decode` (default: the run's own settings; `decode.quantize: int8` loads it int8)."""
    decode = decode or load_run_config(run_dir).decode
    int8 = decode.quantize == "int8"
    dev = resolve_device(int8_device(device) if int8 else device)
    run = load_run(run_dir, checkpoint, dev)
    if int8:  # once, at load: decoding then runs the int8 model like any other
        quantize_int8(run.model)
    amp = autocast_dtype(dev, "auto")
    translator = Translator(
        run.model, run.tokenizer, decode, dev, amp_dtype=amp, src_lang=run.config.data.src_lang
    )
    return translator, run.checkpoint
