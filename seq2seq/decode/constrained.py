"""Lexically constrained beam search: every given target term (a token sequence) appears once in
each output, with dynamic beam allocation (Post & Vilar 2018) run as tensor operations over the
whole batch (after Hu et al. 2019).

Each hypothesis carries, per constraint, whether it is met and how many of its tokens end the
output so far (`pos`), tracked for all constraints at once, so terms sharing a prefix advance
together and a term the model generates on its own counts. A step ranks, for every open
hypothesis, its 2k best tokens plus the next token of each unmet constraint; a candidate's bank is
the number of constraint tokens it has produced (met terms whole, plus its longest partial
term). The k that go on are taken round robin over banks, best bank first, so hypotheses that
made progress are not crowded out by freer ones. EOS is blocked until all constraints are met,
and a met term cannot be completed a second time. Given the target pieces that would glue onto
the word before them (`glue`: no leading "▁", a letter or digit first), the token after a term
starts a new word, so "parapluie" does not become "parapluies" and stop being the term.
At the length cap every hypothesis must end: a term that did not fit is reported unmet
(finished hypotheses rank by fewest unmet, then score). The output cap is raised by the
constraints' tokens, within the model's positions.

A term inside another term of the same sentence ("7" in "37 37 7") is kept by the longer one
and not tracked on its own (it could not appear exactly once otherwise had it come first).
A known limit: partial matches restart only at a term's first token (not the full KMP
failure function), so a term like "a a b" is not noticed inside a freely generated "a a a b"
(the search itself still forces it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds
from seq2seq.decode.search import (
    Hypothesis,
    SearchError,
    _next_token_scores,
    _start,
    _still_decoding,
    length_penalty,
)
from seq2seq.model.transformer import Transformer

UNMET_PENALTY = 1e4  # in the finished ranking, one unmet term outweighs any score


@dataclass
class ConstrainedHypothesis(Hypothesis):
    """A hypothesis of constrained search, with the constraints (indices) it does not hold."""

    unmet: tuple[int, ...] = ()


def terms_tensors(
    constraints: list[tuple[tuple[int, ...], ...]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Constraints of a batch as ids [B, C, L] (0-padded) and token counts [B, C] (0: none)."""
    c = max(1, max(len(cs) for cs in constraints))
    longest = max([1] + [len(t) for cs in constraints for t in cs])
    ids = torch.zeros(len(constraints), c, longest, dtype=torch.long)
    length = torch.zeros(len(constraints), c, dtype=torch.long)
    for i, cs in enumerate(constraints):
        for j, term in enumerate(cs):
            ids[i, j, : len(term)] = torch.tensor(term)
            length[i, j] = len(term)
    return ids.to(device), length.to(device)


@torch.inference_mode()
def constrained_beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    constraints: list[tuple[tuple[int, ...], ...]],
    *,
    beam: int = 4,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.6,
    nbest: int = 1,
    length_norm: str = "gnmt",
    special: SpecialIds = DEFAULT_IDS,
    glue: torch.Tensor | None = None,
) -> list[list[ConstrainedHypothesis]]:
    """Beam search (as `search.beam_search`) whose outputs hold each sentence's constraints
    (token-id sequences) once; the `nbest` best of each sentence, best first."""
    _check_beam(beam, nbest)
    eos, device, k = special.eos, src.device, beam
    batch = src.size(0)
    kept = [_outermost(cs) for cs in constraints]
    terms, term_len = terms_tensors(
        [tuple(cs[j] for j in ks) for cs, ks in zip(constraints, kept)], device
    )
    cache, limits = _start(model, src, src_mask, max_len_a, max_len_b, beam=k)
    limits = (limits + term_len.sum(1)).clamp(max=model.cfg.max_positions - 1)
    steps = int(limits.max())
    banks = int(term_len.sum(1).max()) + 1  # read once: a bank per constraint token, and none
    never = torch.tensor(special.never_generated, dtype=torch.long, device=device)
    finished = _Finished.empty(batch, k, steps, terms.size(1), device)
    active = torch.arange(batch, device=device)
    scores = torch.full((batch, k), -math.inf, device=device)
    scores[:, 0] = 0.0  # one start hypothesis, so the first step's picks are all distinct
    pos = torch.zeros(batch * k, terms.size(1), dtype=torch.long, device=device)
    met = (term_len == 0).repeat_interleave(k, dim=0)  # padding constraints count as met
    just_met = torch.zeros(batch * k, dtype=torch.bool, device=device)  # a term ended last step
    history = torch.empty(batch * k, 0, dtype=torch.long, device=device)
    ids = torch.full((batch * k,), special.start, dtype=torch.long, device=device)
    for t in range(steps):
        n = active.numel()
        rows_terms, rows_len = (x[active].repeat_interleave(k, dim=0) for x in (terms, term_len))
        logits, norm = _next_token_scores(model, ids, cache, never)
        at_cap = t + 1 >= limits[active]
        _block(logits, pos, met, rows_terms, rows_len, eos, at_cap.repeat_interleave(k))
        if glue is not None:
            logits.masked_fill_(just_met.unsqueeze(1) & glue.to(device).unsqueeze(0), -math.inf)
        cand = _candidates(logits, norm, scores, pos, met, rows_terms, rows_len, at_cap, eos)
        order = _allocation(cand.total, cand.bank, banks)[:, : 2 * k]
        pick = {name: v.gather(1, order) for name, v in cand.flat().items()}
        ends = pick["token"] == eos

        # Candidates ending within the first k of the allocation join the finished ones.
        divisor = length_penalty(t + 1, alpha, length_norm)
        ended = _ending(pick, ends, history, k=k, t=t, steps=steps, divisor=divisor)
        unmet = ~cand.met_of(order[:, :k])
        best = finished.add(active, *ended[:2], unmet, length=t + 1, tokens=ended[2])

        go = (ends | ~(pick["total"] > -math.inf)).to(torch.int8).argsort(dim=1, stable=True)
        go = go[:, :k]
        scores = torch.where(ends.gather(1, go), -math.inf, pick["total"].gather(1, go))
        chosen = order.gather(1, go)
        rows = pick["row"].gather(1, go).view(-1)
        ids = pick["token"].gather(1, go).view(-1)
        new_met = cand.met_of(chosen).view(n * k, -1)
        just_met = (new_met & ~met[rows]).any(1)
        pos, met = cand.pos_of(chosen).view(n * k, -1), new_met
        history = torch.cat([history[rows], ids.unsqueeze(1)], dim=1)
        cache.reorder(rows)

        done = (best[:, -1] > -math.inf) | at_cap | ~(scores > -math.inf).any(1)
        keep = _still_decoding(done)
        if keep.numel() == 0:
            break
        if keep.numel() < n:
            keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            active, scores = active[keep], scores[keep]
            history, ids = history[keep_rows], ids[keep_rows]
            pos, met, just_met = pos[keep_rows], met[keep_rows], just_met[keep_rows]
            cache.keep(keep)
    return _unmet_as_given(finished.ranked(nbest, term_len), constraints, kept)


def _check_beam(beam: int, nbest: int) -> None:
    if beam < 2:
        raise ValueError("constrained decoding needs a beam size of at least 2")
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")


def _ending(pick: dict, ends, history, *, k: int, t: int, steps: int, divisor: float):
    """Of the first k allocated candidates, those that end: their length-normalised scores
    (-inf for the others), log-probabilities [n, k] and tokens [n, k, steps]."""
    n = ends.size(0)
    first = pick["total"][:, :k]
    finish = ends[:, :k] & (first > -math.inf)
    score = torch.where(finish, first / divisor, -math.inf)
    tokens = torch.zeros(n, k, steps, dtype=torch.long, device=ends.device)
    if t:  # their prefixes (EOS is implied by the length)
        tokens[:, :, :t] = history[pick["row"][:, :k].reshape(-1)].view(n, k, t)
    return score, first, tokens


def _unmet_as_given(found, constraints, kept):
    """Unmet constraints as indices of the sentence's own list: a term kept by a longer one
    is unmet when that one is."""
    for hyps, cs, ks in zip(found, constraints, kept):
        for h in hyps:
            lacking = [cs[ks[j]] for j in h.unmet]
            h.unmet = tuple(i for i, t in enumerate(cs) if any(_inside(t, u) for u in lacking))
    return found


def _inside(term: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether `term` is a contiguous part of `other` (or equal to it)."""
    n = len(term)
    return any(other[i : i + n] == term for i in range(len(other) - n + 1))


def _outermost(terms: tuple[tuple[int, ...], ...]) -> list[int]:
    """Indices of the distinct terms that are not inside another term of the list."""
    out = []
    for i, t in enumerate(terms):
        inside = any(
            j != i and _inside(t, u) and (len(u) > len(t) or (u == t and j < i))
            for j, u in enumerate(terms)
        )
        if not inside:
            out.append(i)
    return out


def _block(logits, pos, met, terms, term_len, eos: int, at_cap: torch.Tensor) -> None:
    """In place: EOS at -inf while a constraint is unmet (except at the cap, where only EOS
    is allowed), and the last token of a met term at -inf where it would complete it again."""
    unmet_any = ~met.all(1)
    logits[:, eos] = torch.where(unmet_any & ~at_cap, -math.inf, logits[:, eos])
    last = terms.gather(2, (term_len - 1).clamp(min=0).unsqueeze(2)).squeeze(2)  # [N, C]
    again = met & (term_len > 0) & (pos == term_len - 1)
    penalty = torch.where(again, -math.inf, 0.0)
    logits.scatter_add_(1, last, penalty)


@dataclass
class _Candidates:
    """Each open hypothesis's candidates, [n, k·M] flattened per sentence (M per row)."""

    total: torch.Tensor  # log-probability of the continued hypothesis
    token: torch.Tensor
    row: torch.Tensor  # the cache row each continues
    bank: torch.Tensor  # constraint tokens produced
    pos: torch.Tensor  # [n, k·M, C] after the token
    met: torch.Tensor  # [n, k·M, C]

    def flat(self) -> dict[str, torch.Tensor]:
        return {"total": self.total, "token": self.token, "row": self.row}

    def pos_of(self, idx: torch.Tensor) -> torch.Tensor:
        return self.pos.gather(1, idx.unsqueeze(2).expand(-1, -1, self.pos.size(2)))

    def met_of(self, idx: torch.Tensor) -> torch.Tensor:
        return self.met.gather(1, idx.unsqueeze(2).expand(-1, -1, self.met.size(2)))


def _candidates(logits, norm, scores, pos, met, terms, term_len, at_cap, eos: int) -> _Candidates:
    """The 2k best tokens of each open hypothesis plus the next token of each of its unmet
    constraints (not repeating one), with the constraint state each candidate leads to."""
    n, k = scores.shape
    rows, c = pos.shape
    width = min(2 * k, logits.size(-1))
    top_lp, top_tok = logits.topk(width, dim=-1)
    want = terms.gather(2, pos.clamp(max=terms.size(2) - 1).unsqueeze(2)).squeeze(2)  # [N, C]
    want_lp = logits.gather(1, want)
    earlier = torch.ones(c, c, dtype=torch.bool, device=logits.device).tril(-1)
    repeat = (want.unsqueeze(2) == top_tok.unsqueeze(1)).any(2) | (
        (want.unsqueeze(2) == want.unsqueeze(1)) & earlier & ~met.unsqueeze(1)
    ).any(2)
    want_lp = torch.where(met | repeat, -math.inf, want_lp)
    lp = torch.cat([top_lp, want_lp], dim=1) - norm.unsqueeze(1)  # [N, M]
    tok = torch.cat([top_tok, want], dim=1)
    cap = at_cap.repeat_interleave(k).unsqueeze(1)
    only_eos = torch.full_like(lp, -math.inf)
    only_eos[:, 0] = logits[:, eos] - norm
    lp = torch.where(cap, only_eos, lp)
    tok = torch.where(cap, eos, tok)

    # The constraint state after each candidate token.
    x = tok.unsqueeze(2)  # [N, M, 1]
    advance = x == want.unsqueeze(1)
    restart = x == terms[:, :, 0].unsqueeze(1)
    new_pos = torch.where(advance, pos.unsqueeze(1) + 1, restart.long())
    complete = (new_pos == term_len.unsqueeze(1)) & ~met.unsqueeze(1)
    new_met = met.unsqueeze(1) | complete
    # A completed term's own last token may start it again ("35 35 35" holds "35 35" twice).
    again = torch.minimum(restart.long(), (term_len - 1).clamp(min=0).unsqueeze(1))
    new_pos = torch.where(new_pos >= term_len.unsqueeze(1), again, new_pos)
    lengths = term_len.unsqueeze(1)
    bank = (new_met * lengths).sum(2) + torch.where(new_met, 0, new_pos).amax(2)

    m = lp.size(1)
    total = (scores.view(-1, 1) + lp).view(n, k * m)
    row = torch.arange(rows, device=logits.device).unsqueeze(1).expand(rows, m).reshape(n, k * m)
    return _Candidates(
        total,
        tok.reshape(n, k * m),
        row,
        bank.reshape(n, k * m),
        new_pos.reshape(n, k * m, c),
        new_met.reshape(n, k * m, c),
    )


def _allocation(total: torch.Tensor, bank: torch.Tensor, nb: int) -> torch.Tensor:
    """Candidate indices [n, k·M] in dynamic-beam-allocation order: the best of each bank
    (highest bank first), then the second best of each, …; impossible ones last."""
    by_score = total.argsort(dim=1, descending=True, stable=True)
    bank_s = bank.gather(1, by_score)
    by_bank = bank_s.argsort(dim=1, descending=True, stable=True)
    order = by_score.gather(1, by_bank)  # by bank, then score
    banks = bank_s.gather(1, by_bank)
    where = torch.arange(order.size(1), device=total.device).expand_as(order)
    opens = torch.ones_like(banks, dtype=torch.bool)
    opens[:, 1:] = banks[:, 1:] != banks[:, :-1]  # the first candidate of each bank
    starts = torch.where(opens, where, 0)
    rank = where - starts.cummax(dim=1).values  # place within its bank
    key = rank * nb + (nb - 1 - banks)
    possible = total.gather(1, order) > -math.inf
    key = torch.where(possible, key, key.new_full((), torch.iinfo(torch.long).max))
    return order.gather(1, key.argsort(dim=1, stable=True))


@dataclass
class _Finished:
    """The k best finished hypotheses of each sentence (fewest unmet, then score), best first."""

    key: torch.Tensor  # [B, k] score − UNMET_PENALTY × unmet; -inf: an empty slot
    score: torch.Tensor
    log_prob: torch.Tensor
    length: torch.Tensor
    tokens: torch.Tensor  # [B, k, steps]
    unmet: torch.Tensor  # [B, k, C]

    @classmethod
    def empty(cls, batch: int, k: int, steps: int, c: int, device) -> _Finished:
        return cls(
            torch.full((batch, k), -math.inf, device=device),
            torch.full((batch, k), -math.inf, device=device),
            torch.zeros(batch, k, device=device),
            torch.ones(batch, k, dtype=torch.long, device=device),
            torch.zeros(batch, k, steps, dtype=torch.long, device=device),
            torch.zeros(batch, k, c, dtype=torch.bool, device=device),
        )

    def add(self, active, score, log_prob, unmet, *, length: int, tokens) -> torch.Tensor:
        """Merge new finished hypotheses [n, k]; keep the best k; return their keys [n, k]."""
        key = score - UNMET_PENALTY * unmet.sum(2)
        best, order = torch.cat([self.key[active], key], 1).topk(score.size(1), dim=1)
        self.key[active] = best
        lengths = torch.full_like(log_prob, length, dtype=torch.long)
        for name, new in (("score", score), ("log_prob", log_prob), ("length", lengths)):
            old = getattr(self, name)
            old[active] = torch.cat([old[active], new], 1).gather(1, order)
        for name, new in (("tokens", tokens), ("unmet", unmet)):
            old = getattr(self, name)
            idx = order.unsqueeze(2).expand(-1, -1, old.size(2))
            old[active] = torch.cat([old[active], new], 1).gather(1, idx)
        return best

    def ranked(self, nbest: int, term_len: torch.Tensor) -> list[list[ConstrainedHypothesis]]:
        """Each sentence's `nbest` best, best first (one device read)."""
        out, empty = [], []
        unmet = self.unmet & (term_len > 0).unsqueeze(1)
        rows = zip(
            self.score.tolist(),
            self.log_prob.tolist(),
            self.length.tolist(),
            self.tokens.tolist(),
            unmet.tolist(),
        )
        for i, (s, lp, lengths, toks, um) in enumerate(rows):
            hyps = [
                ConstrainedHypothesis(
                    toks[j][: lengths[j] - 1],
                    s[j],
                    lp[j],
                    tuple(c for c, u in enumerate(um[j]) if u),
                )
                for j in range(len(s))
                if s[j] > -math.inf
            ]
            out.append(hyps[:nbest])
            if not hyps:
                empty.append(i)
        if empty:
            raise SearchError(empty)
        return out
