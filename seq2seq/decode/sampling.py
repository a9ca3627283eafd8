"""Sampling the next token instead of taking the most probable one: the back-translation
outputs of Edunov et al. 2018 (§3: sampled and top-k sampled synthetic sources beat beam search's
at scale, being more varied). It replaces greedy search's argmax, on the same batched path.

Every sentence draws from its own stream, keyed by (seed, line number, sentence of the line):
step t's draw is one uniform number hashed from the key and t (a counter-based generator, as
Philox is), turned into a token by the inverse of the row's distribution. So a sentence's
sample depends on its line, not on the batch it is decoded in, its place there, or the lines
decoded before it; and a batch still draws with a few vectorised operations a step."""

from __future__ import annotations

from collections.abc import Callable

import torch

from seq2seq.config import parse_sampling

# (logits [N, V] of the sentences still decoding, their rows in the batch [N], the step).
Choose = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]

_MASK = 0xFFFFFFFF
_BITS = 23  # a uniform's bits: u·total stays below a float32 total (see _pick)


def argmax(logits: torch.Tensor, rows: torch.Tensor | None = None, step: int = 0) -> torch.Tensor:
    """Greedy search's choice: the most probable column of each row."""
    return logits.argmax(dim=-1)


def line_streams(lines: list[int]) -> list[tuple[int, int]]:
    """(line number, sentence of that line, counted from 0) of each segment, in order."""
    seen: dict[int, int] = {}
    out = []
    for line in lines:
        out.append((line, seen.get(line, 0)))
        seen[line] = seen.get(line, 0) + 1
    return out


def sampler(text: str, seed: int, streams: list[tuple[int, int]], device: torch.device) -> Choose:
    """The next-token choice a sampling setting asks for (argmax for `none`); row i of the
    batch draws from the stream of (`seed`, `streams[i]`): (line number, sentence of it)."""
    parsed = parse_sampling(text)
    if parsed is None:
        return argmax
    kind, value = parsed
    keys = torch.tensor([stream_key(seed, *s) for s in streams], dtype=torch.long, device=device)

    def choose(logits: torch.Tensor, rows: torch.Tensor, step: int) -> torch.Tensor:
        u = uniforms(keys[rows], step)
        if kind == "temperature":
            return _pick(logits / value, u)
        if kind == "topk":
            top = logits.topk(min(int(value), logits.size(-1)), dim=-1)
            return top.indices.gather(1, _pick(top.values, u).unsqueeze(1)).squeeze(1)
        # nucleus (Holtzman et al. 2020): the fewest most probable tokens holding mass P.
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        outside = probs.cumsum(dim=-1) - probs >= value  # the top token always stays
        picked = _pick(ordered.masked_fill(outside, -torch.inf), u)
        return order.gather(1, picked.unsqueeze(1)).squeeze(1)

    return choose


def _pick(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The column of each row where its cumulative probability first exceeds u (inverse
    transform sampling); a column of probability 0 is never picked."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(dim=-1)
    # u < 1 - 2^-23, so u·total rounds below total: the pick is a column of the row.
    target = (u * cdf[:, -1]).unsqueeze(1)
    picked = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return picked.clamp_(max=logits.size(-1) - 1)


def stream_key(seed: int, line: int, sentence: int = 0) -> int:
    """The 32-bit key of one sentence's stream."""
    key = _mix((seed >> 32) & _MASK) ^ (seed & _MASK)
    key = _mix(_mix(key) ^ (line & _MASK))
    return _mix(key ^ _mix((sentence + 0x9E3779B9) & _MASK))


def uniforms(keys: torch.Tensor, step: int) -> torch.Tensor:
    """Each stream's uniform number in [0, 1) at `step` (float32, multiples of 2^-23)."""
    bits = _mix(keys ^ _mix((step * 0x9E3779B9 + 0x7F4A7C15) & _MASK)) >> (32 - _BITS)
    return bits.float() * 2.0**-_BITS


def _mix(x):
    """lowbias32 (C. Wellons' 32-bit integer hash) of an int or an int64 tensor of values in
    [0, 2^32): each multiplication is split in 16-bit halves, so int64 never overflows."""
    x = x ^ (x >> 16)
    x = _times(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _times(x, 0x846CA68B)
    return x ^ (x >> 16)


def _times(x, c: int):
    """x·c mod 2^32, for x in [0, 2^32), without leaving int64."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _MASK
