"""The decoder step that greedy and beam search share: starting a batch, the next token's
scores, a forced first token, and which sentences stop (finished, or nobody waits for them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds
from seq2seq.model import compiled_step
from seq2seq.model.transformer import DecoderCache, Transformer

# Which sentences of a batch nobody waits for any more (a server's client went away): asked
# every POLL_STEPS steps, a Python call and no device sync; those sentences stop there and get
# an empty hypothesis.
Dropped = Callable[[], Sequence[bool]]
POLL_STEPS = 8
# A row's best logits [N, w] and their columns [N, w], best first.
Top = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Settings:
    """What a search loop reads of a batch's options, built once by `search.decode`: the beam
    and n-best, the output cap `max_len_a × source length + max_len_b`, the length penalty's
    α and norm, the special ids, and which sentences nobody waits for."""

    beam: int = 4
    nbest: int = 1
    max_len_a: float = 1.0
    max_len_b: int = 50
    alpha: float = 0.6
    length_norm: str = "gnmt"
    special: SpecialIds = DEFAULT_IDS
    dropped: Dropped | None = None


def max_output_lengths(src_mask: torch.Tensor, a: float, b: int, cap: int) -> torch.Tensor:
    """Per-sentence output cap `a·src_len + b` tokens (EOS included), at most `cap`."""
    src_lens = src_mask.sum(dim=1).float()
    return (a * src_lens + b).floor().long().clamp(min=1, max=cap)


def start(model, src, src_mask, a: float, b: int, beam: int = 1, adjust=None):
    """Encode the batch: the decoder's cache (`beam` rows a sentence, room for the longest
    output), each output cap (`adjust`ed: a strategy's `limits`) and the longest."""
    memory = model.encode(src, src_mask)
    # The BOS position takes one slot of the positional table.
    cap = model.cfg.max_positions - 1
    limits = max_output_lengths(src_mask, a, b, cap)
    if adjust is not None:
        limits = adjust(limits, cap)
    steps = int(limits.max())
    return model.start_decoding(memory, src_mask, beam, capacity=steps), limits, steps


def next_token_scores(
    model: Transformer,
    ids: torch.Tensor,
    cache: DecoderCache,
    never: torch.Tensor,
    rows: torch.Tensor | None = None,
    width: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, Top | None]:
    """Logits of the next token (`never`, e.g. PAD and BOS, at -inf), their log-normaliser per
    row, and with a `width` each row's `width` best logits and their columns, best first.

    log p(token) = logit − logsumexp(logits). Search only needs a handful of tokens per row,
    so it subtracts the normaliser from those instead of writing a full log-softmax. With a
    shortlist's sorted `rows`, column j is token rows[j] and the normaliser runs over the
    shortlist only, as Marian's does (`never`: columns then, see `positions`). On the compiled
    step the three come from one pass over each row (compiled_step.select), else from torch.
    """
    if rows is None:
        logits = model.decode_step(ids, cache).float()
    else:
        logits = model.decode_step(ids, cache, rows=rows).float()
    if cache.compiled is not None and logits.is_contiguous() and not torch.is_grad_enabled():
        norm, best, column = compiled_step.select(logits, never, width)
        return logits, norm, (best, column) if width else None
    norm = torch.logsumexp(logits, dim=-1)  # the model's own distribution, over every token
    logits.index_fill_(1, never, -math.inf)  # padding, BOS, a start token: never outputs
    return logits, norm, top(logits, width) if width else None


def top(logits: torch.Tensor, width: int) -> Top:
    """Each row's `width` best logits (at most all of them) and their columns, best first."""
    if width == 1:  # argmax, as greedy search always chose (of equal logits, the first)
        column = logits.argmax(dim=-1, keepdim=True)
        return logits.gather(1, column), column
    best, column = logits.topk(min(width, logits.size(-1)), dim=-1)
    return best, column


def positions(rows: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
    """The columns of vocabulary `ids` (each among a shortlist's sorted `rows`); without a
    shortlist, the ids themselves."""
    return ids if rows is None else torch.searchsorted(rows, ids)


def present(rows: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
    """The columns of those of `ids` a shortlist's `rows` hold (all of them without one)."""
    return ids if rows is None else torch.searchsorted(rows, ids[torch.isin(ids, rows)])


def forced(logits: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores where each row's only possible token is `first[row]`, at log-probability 0."""
    forced = torch.full_like(logits, -math.inf).scatter_(1, first.unsqueeze(1), 0.0)
    return forced, torch.zeros(logits.size(0), device=logits.device)


def still_decoding(done: torch.Tensor) -> torch.Tensor:
    """Indices of the rows not done: the step's one read-back from the device."""
    return (~done).nonzero().squeeze(1)


def poll_dropped(done: torch.Tensor, dropped: Dropped | None, t: int, rows: torch.Tensor):
    """`done` [rows], with the sentences nobody waits for any more, asked every POLL_STEPS
    steps (`rows`: original sentence indices, on the device)."""
    if dropped is None or t % POLL_STEPS != POLL_STEPS - 1:
        return done
    gone = torch.tensor(list(dropped()), dtype=torch.bool)
    return done | gone.to(rows.device, non_blocking=True)[rows]
