"""The one beam loop: batched beam search whose candidates come from a pluggable strategy.

The loop owns what every beam search shares: the decoder cache, the open hypotheses' scores
and tokens, the finished hypotheses, the length caps, polling for sentences nobody waits for,
and stopping. A strategy owns which candidates a step offers and in what order they are
preferred (`PlainBeam`: the 2k best by score, as Hugging Face `generate`; `ConstrainedBeam` in
constrained.py: dynamic beam allocation over banks), any per-hypothesis state it needs, when a
sentence may stop, and how its finished hypotheses read back. Sampling is not a strategy: it is
greedy search's choice of the next token (sampling.py). A vocabulary shortlist (shortlist.py,
`beam_loop`'s `scored`: its sorted target ids) narrows the logits' columns to those ids, which
`PlainBeam` maps back.

All sentences and their beams decode as one [sentences × beam] batch. Each step takes the
strategy's 2k preferred candidates of a sentence: those that end (EOS) within the first k join
its finished hypotheses (the best k kept, by length-normalised score less a penalty per unmet
term), and the first k that do not end go on, so the beam stays k wide. A sentence stops when
its strategy says so, at its length cap (where every open hypothesis must end), or when it has
no open hypothesis left. State stays on the device; a step reads back one thing, which
sentences are still decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from seq2seq.decode.hypothesis import Hypothesis, SearchError, length_penalty
from seq2seq.decode.step import (
    Settings,
    Top,
    forced,
    next_token_scores,
    poll_dropped,
    positions,
    present,
    start,
    still_decoding,
    top,
)
from seq2seq.model.transformer import Transformer

UNMET_PENALTY = 1e4  # in the finished ranking, one unmet term outweighs any score


@dataclass
class Candidates:
    """A step's preferred candidates of each sentence, best first, [n, 2k] each."""

    total: torch.Tensor  # log-probability of the continued hypothesis (-inf: impossible)
    token: torch.Tensor
    row: torch.Tensor  # the cache row each continues
    choice: torch.Tensor  # the strategy's own index of each, handed back to `unmet`/`advance`


class Strategy(Protocol):
    """Which candidates survive a beam step; the loop does everything else."""

    def limits(self, limits: torch.Tensor, cap: int) -> torch.Tensor:
        """Each sentence's output cap, adjusted (constrained search adds its terms' length)."""

    def width(self, k: int) -> int:
        """How many best columns of each row `candidates` reads (0: none), for a beam of k."""

    def candidates(
        self, logits, norm, best: Top | None, scores, at_cap: torch.Tensor, active: torch.Tensor
    ) -> Candidates:
        """The 2k preferred continuations of each active sentence's k open hypotheses (`best`:
        each row's `width` best logits and columns, when asked for and not forced)."""

    def unmet(self, choice: torch.Tensor) -> torch.Tensor:
        """Per chosen candidate [n, k], which terms it lacks [n, k, C] (C may be 0)."""

    def advance(self, choice: torch.Tensor, rows: torch.Tensor) -> None:
        """The hypotheses that go on are these candidates [n, k] (continuing cache `rows`)."""

    def keep(self, rows: torch.Tensor) -> None:
        """Only these hypothesis rows are still decoding."""

    def done(self, kth_finished, scores, limits: torch.Tensor, length: int) -> torch.Tensor:
        """Which active sentences may stop before their cap [n]."""

    def hypotheses(self, finished: Finished, nbest: int) -> list[list[Hypothesis]]:
        """Each sentence's `nbest` best finished hypotheses, best first."""


@torch.inference_mode()
def beam_loop(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    strategy: Strategy,
    settings: Settings,
    *,
    first: torch.Tensor | None = None,
    scored: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over a padded batch [B, S] with `strategy` choosing the candidates."""
    s = settings
    _check(s.beam, s.nbest, s.alpha, s.length_norm)
    special, dropped, device, k = s.special, s.dropped, src.device, s.beam
    eos = special.eos
    cache, limits, steps = start(
        model, src, src_mask, s.max_len_a, s.max_len_b, beam=k, adjust=strategy.limits
    )
    never = present(scored, torch.tensor(special.never_generated, dtype=torch.long, device=device))
    open_ = _Open.start(limits, k, special.start)
    width = strategy.width(k)
    finished: Finished | None = None
    for t in range(steps):
        n = open_.active.numel()
        logits, norm, best = next_token_scores(model, open_.ids, cache, never, scored, width)
        if t == 0 and first is not None:  # every sentence is still active at the first step
            firsts = positions(scored, first.to(device)).repeat_interleave(k)
            (logits, norm), best = forced(logits, firsts), None
        at_cap = t + 1 >= open_.limits
        cand = strategy.candidates(logits, norm, best, open_.scores, at_cap, open_.active)
        ends = cand.token == eos

        # Candidates ending within the first k join the finished ones; the best k stay.
        unmet = strategy.unmet(cand.choice[:, :k])
        finished = finished or Finished.empty(src.size(0), k, steps, unmet.size(2), device)
        score, log_prob, tokens = _ending(cand, ends, open_.history, k, t)
        divisor = length_penalty(t + 1, s.alpha, s.length_norm)
        best = finished.add(open_.active, score / divisor, log_prob, unmet, t + 1, tokens)

        # The first k candidates that do not end go on (stable: in preference order).
        go = (ends | ~(cand.total > -math.inf)).to(torch.int8).argsort(dim=1, stable=True)[:, :k]
        rows = cand.row.gather(1, go).view(-1)
        strategy.advance(cand.choice.gather(1, go), rows)
        open_.advance(cand, ends, go, rows)
        cache.reorder(rows)

        done = at_cap | ~(open_.scores > -math.inf).any(1)
        done = done | strategy.done(best[:, -1], open_.scores, open_.limits, t + 1)
        done = poll_dropped(done, dropped, t, open_.active)
        keep = still_decoding(done)
        if keep.numel() == 0:
            break
        if keep.numel() < n:
            _narrow(keep, k, open_, strategy, cache)
    gone = [] if dropped is None else list(dropped())
    return _with_dropped(strategy.hypotheses(finished, s.nbest), gone)


def _narrow(keep: torch.Tensor, k: int, open_: _Open, strategy: Strategy, cache) -> None:
    """Only the sentences `keep` (indices among the active ones) go on decoding."""
    keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
    open_.keep(keep, keep_rows)
    strategy.keep(keep_rows)
    cache.keep(keep)


def _check(beam: int, nbest: int, alpha: float, length_norm: str) -> None:
    """Options that cannot work, refused before any work."""
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")
    length_penalty(1, alpha, length_norm)  # an unknown norm raises


@dataclass
class _Open:
    """The open hypotheses: k rows a sentence, for the sentences still searching."""

    active: torch.Tensor  # [n] original sentence indices
    limits: torch.Tensor  # [n] their output caps
    scores: torch.Tensor  # [n, k] log-probabilities (-inf: an empty slot)
    history: torch.Tensor  # [n·k, t] tokens so far
    ids: torch.Tensor  # [n·k] the last token of each

    @classmethod
    def start(cls, limits: torch.Tensor, k: int, start_id: int) -> _Open:
        batch, device = limits.size(0), limits.device
        scores = torch.full((batch, k), -math.inf, device=device)
        scores[:, 0] = 0.0  # one start hypothesis, so the first step's picks are all distinct
        return cls(
            torch.arange(batch, device=device),
            limits,
            scores,
            torch.empty(batch * k, 0, dtype=torch.long, device=device),
            torch.full((batch * k,), start_id, dtype=torch.long, device=device),
        )

    def advance(self, cand: Candidates, ends, go, rows) -> None:
        self.scores = torch.where(ends.gather(1, go), -math.inf, cand.total.gather(1, go))
        self.ids = cand.token.gather(1, go).view(-1)
        self.history = torch.cat([self.history[rows], self.ids.unsqueeze(1)], dim=1)

    def keep(self, keep, keep_rows) -> None:
        self.active, self.limits, self.scores = (
            self.active[keep],
            self.limits[keep],
            self.scores[keep],
        )
        self.history, self.ids = self.history[keep_rows], self.ids[keep_rows]


def _ending(cand: Candidates, ends, history, k: int, t: int):
    """Of the first k candidates, those that end: their log-probabilities as scores (-inf for
    the others), log-probabilities [n, k] and tokens [n, k, t] (EOS implied by length)."""
    first = cand.total[:, :k]
    finish = ends[:, :k] & (first > -math.inf)
    tokens = history[cand.row[:, :k].reshape(-1)].view(ends.size(0), k, t)
    return torch.where(finish, first, -math.inf), first, tokens


@dataclass
class Finished:
    """The k best finished hypotheses of each sentence, by original index, best first: by
    score less UNMET_PENALTY per unmet term (key -inf: an empty slot)."""

    key: torch.Tensor  # [B, k]
    # [B, k, 3]: length-normalised log-probability, log-probability and length (EOS included),
    # in float64, which holds each exactly, so one gather moves all three
    values: torch.Tensor
    tokens: torch.Tensor  # [B, k, steps]; columns from a hypothesis's length on are 0
    unmet: torch.Tensor  # [B, k, C]

    @classmethod
    def empty(cls, batch: int, k: int, steps: int, c: int, device) -> Finished:
        values = torch.zeros(batch, k, 3, dtype=torch.float64, device=device)
        values[:, :, 0], values[:, :, 2] = -math.inf, 1
        return cls(
            torch.full((batch, k), -math.inf, device=device),
            values,
            torch.zeros(batch, k, steps, dtype=torch.long, device=device),
            torch.zeros(batch, k, c, dtype=torch.bool, device=device),
        )

    def add(self, active, score, log_prob, unmet, length: int, tokens) -> torch.Tensor:
        """Merge new finished hypotheses [n, k] (`tokens` [n, k, length - 1]) of the `active`
        sentences, keep the best k of each; return their keys [n, k]."""
        key = score - UNMET_PENALTY * unmet.sum(2) if unmet.size(2) else score
        best, order = torch.cat([self.key[active], key], 1).topk(score.size(1), dim=1)
        self.key[active] = best
        new = torch.stack([score, log_prob, torch.full_like(score, length)], 2)
        self.values[active] = torch.cat([self.values[active], new], 1).gather(
            1, order.unsqueeze(2).expand(-1, -1, 3)
        )
        # Every hypothesis finished so far is shorter than the new ones: its later columns are
        # 0, so only the first length - 1 columns move.
        width = tokens.size(2)
        if width:
            old = self.tokens[active, :, :width]
            idx = order.unsqueeze(2).expand(-1, -1, width)
            self.tokens[active, :, :width] = torch.cat([old, tokens], 1).gather(1, idx)
        if unmet.size(2):
            idx = order.unsqueeze(2).expand(-1, -1, unmet.size(2))
            self.unmet[active] = torch.cat([self.unmet[active], unmet], 1).gather(1, idx)
        return best

    def rows(self, term_len: torch.Tensor | None = None):
        """Per sentence: (score, log_prob, tokens, unmet indices) of each filled slot, best
        first (one device read); `term_len` [B, C] > 0 marks the real terms."""
        unmet = self.unmet if term_len is None else self.unmet & (term_len > 0).unsqueeze(1)
        score, log_prob, length = self.values.unbind(2)
        # Back to the float32 the search computed in, then to Python floats, as before.
        columns = (score.float(), log_prob.float(), length.long(), self.tokens, unmet)
        for s, lp, lengths, toks, um in zip(*(c.tolist() for c in columns)):
            yield [
                (s[j], lp[j], toks[j][: lengths[j] - 1], tuple(c for c, u in enumerate(um[j]) if u))
                for j in range(len(s))
                if s[j] > -math.inf
            ]


def _with_dropped(found: list[list[Hypothesis]], gone: list[bool]) -> list[list[Hypothesis]]:
    """A dropped sentence without any finished hypothesis gets an empty one; any other
    sentence without one is a SearchError (its scores were not finite)."""
    empty = []
    for i, hyps in enumerate(found):
        if not hyps and i < len(gone) and gone[i]:
            hyps.append(Hypothesis([], 0.0, 0.0))
        if not hyps:
            empty.append(i)
    if empty:
        raise SearchError(empty)
    return found


class PlainBeam:
    """Beam search as Hugging Face `generate` runs it (`early_stopping=True`): the 2k best
    continuations by score; a sentence stops once it has k finished hypotheses. fairseq differs
    only in never replacing a finished hypothesis by a better one found in the same step as the
    k-th. Beam 1 is exactly greedy search."""

    def __init__(self, eos: int, rows: torch.Tensor | None = None):
        self.eos, self.rows = eos, rows
        # With a shortlist, logits' columns are its sorted rows: EOS's column is where it sits.
        if rows is not None:
            eos = int(positions(rows, torch.tensor(eos, device=rows.device)))
        self.eos_column = eos
        self._first_rows: torch.Tensor | None = None  # each sentence's first row, kept

    def limits(self, limits: torch.Tensor, cap: int) -> torch.Tensor:
        return limits

    def width(self, k: int) -> int:
        # The best 2k of a sentence's k·V continuations are among each beam's own best 2k.
        return 2 * k

    def candidates(self, logits, norm, best, scores, at_cap, active) -> Candidates:
        n, k = scores.shape
        row_best, row_token = best if best is not None else top(logits, 2 * k)  # best first
        width = row_best.size(1)
        row_best = (row_best - norm.unsqueeze(1)).view(n, k, width)
        row_token = row_token.view(n, k, width)
        if self.rows is not None:
            row_token = self.rows[row_token]
        # A sentence at its length cap may only end: each beam's one candidate is EOS.
        eos = self.eos
        eos_scores = (logits[:, self.eos_column] - norm).view(n, k, 1)
        only_eos = F.pad(eos_scores, (0, width - 1), value=-math.inf)
        cap = at_cap.view(n, 1, 1)
        row_best = torch.where(cap, only_eos, row_best)
        row_token = torch.where(cap, eos, row_token)
        candidates = (scores.unsqueeze(2) + row_best).view(n, k * width)
        total, pick = candidates.topk(min(2 * k, k * width), dim=1)
        token = row_token.view(n, k * width).gather(1, pick)
        if self._first_rows is None or self._first_rows.size(0) < n:  # [n, 1]: n·k
            self._first_rows = torch.arange(n, device=logits.device).unsqueeze(1) * k
        row = self._first_rows[:n] + pick // width
        return Candidates(total, token, row, pick)

    def unmet(self, choice: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*choice.shape, 0, dtype=torch.bool, device=choice.device)

    def advance(self, choice, rows) -> None:
        pass

    def keep(self, rows) -> None:
        pass

    def done(self, kth_finished, scores, limits, length: int) -> torch.Tensor:
        return kth_finished > -math.inf

    def hypotheses(self, finished: Finished, nbest: int) -> list[list[Hypothesis]]:
        return [
            [Hypothesis(tokens, s, lp) for s, lp, tokens, _ in row][:nbest]
            for row in finished.rows()
        ]
