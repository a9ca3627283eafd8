"""Lexically constrained beam search, as a strategy of the one beam loop (beam.py): every
given target term appears in each output, as often as it is given, with dynamic beam allocation
(Post & Vilar 2018) run as tensor operations over the whole batch (after Hu et al. 2019).

Each hypothesis carries, per constraint, how often it has appeared and how many of its tokens end
the output so far (`pos`), tracked for all constraints at once, so terms sharing a prefix advance
together and a term the model generates on its own counts. A step ranks, for every open
hypothesis, its 2k best tokens plus the next token of each unmet constraint; a candidate's bank is
the number of constraint tokens it has produced (met terms whole, plus its longest partial
term). The candidates are taken round robin over banks, best bank first, so hypotheses that
made progress are not crowded out by freer ones. EOS is blocked until all constraints are met.
A term appears as many times as the sentence's list gives it (the glossary lists a term once per
time its source term occurs, so "hundred" twice keeps both "cent"s), and completing it once more
is blocked, so a forced term is not doubled ("fleurs fleurs"). Given the target pieces that
would glue onto the word before them (`glue`: no leading "▁", a letter or digit first), the
token after a term starts a new word, so "parapluie" does not become "parapluies".

Stopping: dynamic beam allocation keeps low-scoring hypotheses that forced a term early; they
finish within a few steps, so "k finished" would end a sentence before its natural hypothesis
does and drop content. A sentence stops only when no open hypothesis can beat its k-th finished
one: an open hypothesis's score is at most its log-probability over the length penalty at the
cap (log-probabilities only fall, the penalty only grows). At the length cap every hypothesis
must end: a term that did not fit is reported unmet (finished hypotheses rank by fewest unmet,
then score). The output cap is raised by the constraints' tokens, within the model's positions.

A term is seen in each way the tokenizer writes it (`Spellings`): on its own ("▁", "hôtel"),
and glued onto the token before it, as after "l'" or "-" ("▁l", "'", "hôtel"). A glued spelling
counts only after a token that ends without a letter or digit, so a term counts where no word
character touches it, as `glossary.term_use` counts it in text: "l'hôtel" holds "hôtel" and is
not given a second "hôtel"; "hôtels" does not hold it. Only the term's own spelling is forced.

Two rules keep a forced term from damaging the sentence around it (`Spellings.stay`, `final`).
A hypothesis that has cut a word of an unmet term (written "bouton-" or "bouton-p" of
"bouton-poussoir", not "bouton") may only write the term's next token: a started term is
finished or its hypothesis dropped, never left as a fragment ("bouton-pouss et bouton-les").
And while a term is unmet, a hypothesis may not write a sentence-final piece (".", "!", "?")
beyond the sentence ends its source holds before its last sentence: the term comes before the
full stop, not appended after it ("affichée. croisée."); at the length cap EOS still ends it.

A term inside another term of the same sentence ("7" in "37 37 7") is kept by the longer one
and not tracked on its own. A known limit: partial matches restart only at a term's first token
(not the full KMP failure function), so a term like "a a b" is not noticed inside a freely
generated "a a a b" (the search itself still forces it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from seq2seq.decode.beam import Candidates
from seq2seq.decode.hypothesis import ConstrainedHypothesis, length_penalty
from seq2seq.decode.step import Settings

Terms = list[tuple[tuple[int, ...], ...]]


@dataclass(frozen=True)
class Spellings:
    """How terms and sentences are written in tokens: `glued[term]`, a term's segmentations
    glued onto the token before it (no leading "▁"), counted after a token that `opens` [V]
    marks as ending without a letter or digit; `stay[spelling]`, per position j, whether a
    hypothesis that wrote the first j tokens has cut a word of the term ("bouton-", "bouton-p")
    and must write the next; `final` [V], the pieces that end a sentence ("."), kept from a
    hypothesis with an unmet term once it has written `ends[i]` of them (the sentence ends its
    source sentence i holds before its last)."""

    glued: dict[tuple[int, ...], tuple[tuple[int, ...], ...]]
    opens: torch.Tensor
    stay: dict[tuple[int, ...], tuple[bool, ...]] = field(default_factory=dict)
    final: torch.Tensor | None = None
    ends: tuple[int, ...] = ()


def terms_tensors(
    constraints: list[tuple[tuple[int, ...], ...]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct constraints of a batch as ids [B, C, L] (0-padded) and token counts [B, C]
    (0: none)."""
    c = max(1, max(len(cs) for cs in constraints))
    longest = max([1] + [len(t) for cs in constraints for t in cs])
    ids = torch.zeros(len(constraints), c, longest, dtype=torch.long)
    length = torch.zeros(len(constraints), c, dtype=torch.long)
    for i, cs in enumerate(constraints):
        for j, term in enumerate(cs):
            ids[i, j, : len(term)] = torch.tensor(term)
            length[i, j] = len(term)
    return ids.to(device), length.to(device)


def unmet_as_given(found, constraints, kept):
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


def times_needed(terms: tuple[tuple[int, ...], ...], kept: list[int]) -> list[int]:
    """How often each kept term must appear: once per time the list gives it."""
    return [sum(t == terms[j] for t in terms) for j in kept]


def outermost(terms: tuple[tuple[int, ...], ...]) -> list[int]:
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


def holds_terms(
    outputs: list[list[list[int]]],
    constraints: Terms,
    spellings: Spellings | None = None,
    glue: torch.Tensor | None = None,
) -> list[bool]:
    """Per sentence, whether each of its outputs (token ids) holds every term exactly as often
    as its list gives it (more is what the search never writes), counted as the search counts a
    term: any of its spellings (a glued one after a token that opens a word), not followed by a
    piece that `glue` says continues the word."""
    seen = {t for outs in outputs for out in outs for t in out}
    opens = _marked(spellings.opens if spellings is not None else None, seen)
    glues = _marked(glue, seen)
    glued = spellings.glued if spellings is not None else {}
    out = []
    for outs, terms in zip(outputs, constraints):
        kept = outermost(terms)
        needs = [(terms[j], n) for j, n in zip(kept, times_needed(terms, kept))]
        out.append(
            all(
                _times(tokens, term, glued.get(term, ()), opens, glues) == n
                for tokens in outs
                for term, n in needs
            )
        )
    return out


def _marked(mask: torch.Tensor | None, tokens: set[int]) -> set[int]:
    """The `tokens` that `mask` [V] marks (none without a mask)."""
    if mask is None or not tokens:
        return set()
    ids = sorted(tokens)
    flags = mask[torch.tensor(ids, device=mask.device)].tolist()
    return {t for t, flag in zip(ids, flags) if flag}


def _times(tokens: list[int], term, glued, opens: set[int], glues: set[int]) -> int:
    """Occurrences of `term` in `tokens` (its own spelling, or a `glued` one after a token in
    `opens`, or first), none followed by a token in `glues`; overlapping ones each count."""
    ends = set()
    for spelling, is_glued in ((term, False), *((g, True) for g in glued)):
        n = len(spelling)
        for i in range(len(tokens) - n + 1):
            if tuple(tokens[i : i + n]) != spelling:
                continue
            starts = not is_glued or i == 0 or tokens[i - 1] in opens
            glued_on = i + n < len(tokens) and tokens[i + n] in glues
            if starts and not glued_on:
                ends.add(i + n)  # spellings ending at one place are one occurrence
    return len(ends)


class ConstrainedBeam:
    """The beam loop's strategy for sentences with target terms (see the module's docstring)."""

    def __init__(
        self,
        constraints: Terms,
        settings: Settings,
        *,
        glue,
        spellings: Spellings | None = None,
    ):
        self.constraints, self.k, self.eos = constraints, settings.beam, settings.special.eos
        self.alpha, self.norm, self.glue = settings.alpha, settings.length_norm, glue
        self.spellings = spellings
        self.kept = [outermost(cs) for cs in constraints]
        self.term_len: torch.Tensor | None = None  # [B, C], set by `limits` on the device

    def limits(self, limits: torch.Tensor, cap: int) -> torch.Tensor:
        kept = [tuple(cs[j] for j in ks) for cs, ks in zip(self.constraints, self.kept)]
        device = limits.device
        self.term_len = terms_tensors(kept, device)[1]
        how = self.spellings or Spellings({}, torch.zeros(0, dtype=torch.bool))
        self.spelled = _spelled(kept, how.glued, how.stay, device)
        self.stays = bool(self.spelled.stay.any())  # read once: whether any term cuts a word
        ends = how.ends or (0,) * len(kept)
        self.ends = torch.tensor(ends, dtype=torch.long, device=device)  # [B]
        self.need = torch.zeros_like(self.term_len)  # [B, C]; 0 for padding (always met)
        for i, (cs, ks) in enumerate(zip(self.constraints, self.kept)):
            self.need[i, : len(ks)] = torch.tensor(times_needed(cs, ks))
        rows = len(self.constraints) * self.k
        tokens = (self.term_len * self.need).sum(1)
        self.banks = int(tokens.max()) + 1  # read once: one bank per term token
        spelled = self.spelled.terms.size(1)
        self.pos = torch.zeros(rows, spelled, dtype=torch.long, device=device)  # per spelling
        # How often each term appeared, up to its need.
        self.count = torch.zeros(rows, self.term_len.size(1), dtype=torch.long, device=device)
        self.just_met = torch.zeros(rows, dtype=torch.bool, device=device)
        self.opens = torch.ones(rows, dtype=torch.bool, device=device)  # the start opens a word
        self.marks = torch.zeros(rows, dtype=torch.long, device=device)  # sentence ends written
        return (limits + tokens).clamp(max=cap)

    def width(self, k: int) -> int:
        return 0  # it ranks every column of a row, after its own masks

    def candidates(self, logits, norm, best, scores, at_cap, active):
        k = self.k
        spelled = self.spelled.rows(active, k)
        term_len, need = (x[active].repeat_interleave(k, dim=0) for x in (self.term_len, self.need))
        state = _State(self.pos, self.count, need, self.opens)
        _block(logits, state, spelled, self.eos, at_cap.repeat_interleave(k))
        if self.stays:
            _stay(logits, state, spelled, at_cap.repeat_interleave(k))
        final = self.spellings.final if self.spellings is not None else None
        if final is not None:  # no sentence end while a term waits: it would come after it
            over = self.marks >= self.ends[active].repeat_interleave(k)
            late = (over & ~state.met.all(1)).unsqueeze(1) & final.to(logits.device).unsqueeze(0)
            logits.masked_fill_(late, -math.inf)
        if self.glue is not None:
            glue = self.glue.to(logits.device).unsqueeze(0)
            logits.masked_fill_(self.just_met.unsqueeze(1) & glue, -math.inf)
        cand = _candidates(logits, norm, scores, state, spelled, term_len, at_cap, self.eos)
        # k − 1 places follow the model as plain beam search would; measured on the demo set
        # (scripts/bench_constrained_identity.py): ⌈k/2⌉ left the plain output unchanged on
        # 93.4% of lines that held their term already, k − 1 on 96.5%, terms still all placed.
        order = _allocation(cand.total, cand.bank, self.banks, free=k - 1)[:, : 2 * k]
        self._cand = cand
        flat = cand.flat()
        return Candidates(
            *(flat[name].gather(1, order) for name in ("total", "token", "row")), order
        )

    def unmet(self, choice: torch.Tensor) -> torch.Tensor:
        return ~self._cand.of("met", choice)

    def advance(self, choice: torch.Tensor, rows: torch.Tensor) -> None:
        n = choice.numel()
        count = self._cand.of("count", choice).reshape(n, -1)
        self.just_met = (count > self.count[rows]).any(1)  # a term was completed just now
        self.pos, self.count = self._cand.of("pos", choice).reshape(n, -1), count
        if self.spellings is not None:  # whether the token just written lets a word start
            token = self._cand.token.gather(1, choice).reshape(-1)
            self.opens = self.spellings.opens.to(token.device)[token]
            if self.spellings.final is not None:
                self.marks = self.marks[rows] + self.spellings.final.to(token.device)[token]

    def keep(self, rows: torch.Tensor) -> None:
        self.pos, self.count, self.just_met = self.pos[rows], self.count[rows], self.just_met[rows]
        self.opens, self.marks = self.opens[rows], self.marks[rows]

    def done(self, kth_finished, scores, limits, length: int) -> torch.Tensor:
        bound = scores.max(1).values / length_penalty(limits.float(), self.alpha, self.norm)
        return kth_finished >= bound

    def hypotheses(self, finished, nbest: int) -> list[list[ConstrainedHypothesis]]:
        found = [
            [ConstrainedHypothesis(tokens, s, lp, unmet) for s, lp, tokens, unmet in row][:nbest]
            for row in finished.rows(self.term_len)
        ]
        return unmet_as_given(found, self.constraints, self.kept)


@dataclass
class _Spelled:
    """Every spelling of each sentence's terms, [B, R] (R ≥ C): the C terms' own spellings
    first, then the glued ones, each naming its term (`term`) and whether it is glued."""

    terms: torch.Tensor  # [B, R, L] token ids, 0-padded
    length: torch.Tensor  # [B, R]; 0: padding
    term: torch.Tensor  # [B, R] the term (column of C) each spells
    glued: torch.Tensor  # [B, R] counted only after a token that opens a word
    stay: torch.Tensor  # [B, R, L] after j tokens, the next must follow (a word was cut)

    def rows(self, active: torch.Tensor, k: int) -> _Spelled:
        """The spellings of each open hypothesis of the `active` sentences, [N, R]."""
        return _Spelled(*(x[active].repeat_interleave(k, dim=0) for x in vars(self).values()))

    def of_term(self, per_term: torch.Tensor) -> torch.Tensor:
        """A per-term value [N, (M,) C] read for each spelling [N, (M,) R]."""
        term = (
            self.term
            if per_term.dim() == 2
            else self.term.unsqueeze(1).expand(-1, per_term.size(1), -1)
        )
        return per_term.gather(-1, term)

    def to_terms(self, per_spelling: torch.Tensor, c: int) -> torch.Tensor:
        """Whether any spelling of each term is true, [N, M, R] → [N, M, C]."""
        member = torch.nn.functional.one_hot(self.term, c) & (self.length > 0).unsqueeze(2)
        return torch.bmm(per_spelling.float(), member.float()) > 0


def _spelled(
    kept: list[tuple[tuple[int, ...], ...]], glued: dict, stay: dict, device: torch.device
) -> _Spelled:
    """Each sentence's term spellings: its kept terms as given, then each one's glued ones."""
    c = max(1, max(len(cs) for cs in kept))
    rows, term, flag = [], [], []
    for cs in kept:
        own = list(cs) + [(0,)] * (c - len(cs))
        more = [(j, g) for j, t in enumerate(cs) for g in glued.get(t, ())]
        rows.append(tuple(own) + tuple(g for _, g in more))
        term.append(list(range(c)) + [j for j, _ in more])
        flag.append([False] * c + [True] * len(more))
    ids, length = terms_tensors(rows, device)
    for i, cs in enumerate(kept):
        length[i, len(cs) : c] = 0  # the padding terms
    width = ids.size(1)
    term_t = torch.zeros(len(kept), width, dtype=torch.long)
    glued_t = torch.zeros(len(kept), width, dtype=torch.bool)
    stay_t = torch.zeros(ids.shape, dtype=torch.bool)
    for i, (ts, fs, rs) in enumerate(zip(term, flag, rows)):
        term_t[i, : len(ts)], glued_t[i, : len(fs)] = torch.tensor(ts), torch.tensor(fs)
        for r, spelling in enumerate(rs):
            flags = stay.get(spelling, ())
            stay_t[i, r, : len(flags)] = torch.tensor(flags, dtype=torch.bool)
    return _Spelled(ids, length, term_t.to(device), glued_t.to(device), stay_t.to(device))


@dataclass
class _State:
    """Each open hypothesis's progress through its terms' spellings [N, R] and terms [N, C]."""

    pos: torch.Tensor  # [N, R] tokens of the spelling that end the output so far
    count: torch.Tensor  # [N, C] times the term appeared (up to `need`)
    need: torch.Tensor  # [N, C] times it must appear (0: padding)
    opens: torch.Tensor  # [N] whether the last token lets a glued spelling start

    @property
    def met(self) -> torch.Tensor:
        return self.count >= self.need


def _block(logits, state: _State, spelled: _Spelled, eos: int, at_cap: torch.Tensor) -> None:
    """In place: EOS at -inf while a constraint is unmet (except at the cap, where only EOS
    is allowed), and the last token of a term's spelling at -inf where the term would appear
    more often than its source asks for."""
    met = state.met
    logits[:, eos] = torch.where(~met.all(1) & ~at_cap, -math.inf, logits[:, eos])
    terms, length = spelled.terms, spelled.length
    last = terms.gather(2, (length - 1).clamp(min=0).unsqueeze(2)).squeeze(2)  # [N, R]
    again = spelled.of_term(met) & (length > 0) & (state.pos == length - 1)
    again &= ~spelled.glued | (length > 1) | state.opens.unsqueeze(1)  # where it would count
    logits.scatter_add_(1, last, torch.where(again, -math.inf, 0.0))


def _stay(logits, state: _State, spelled: _Spelled, at_cap: torch.Tensor) -> None:
    """In place: a hypothesis that cut a word of an unmet term ("bouton-p") may only write
    the term's next token, so a started term is finished or its hypothesis dropped, never left
    as a fragment ("bouton-pouss")."""
    pos = state.pos
    cut = spelled.stay.gather(2, pos.clamp(max=spelled.stay.size(2) - 1).unsqueeze(2)).squeeze(2)
    cut &= (pos > 0) & ~spelled.of_term(state.met) & ~at_cap.unsqueeze(1)  # [N, R]
    terms = spelled.terms
    want = terms.gather(2, pos.clamp(max=terms.size(2) - 1).unsqueeze(2)).squeeze(2)  # [N, R]
    votes = torch.zeros_like(logits).scatter_add_(1, want, cut.float())
    binding = cut.sum(1, keepdim=True)  # a token must be the next of every cut spelling
    logits.masked_fill_((binding > 0) & (votes < binding), -math.inf)


@dataclass
class _Candidates:
    """Each open hypothesis's candidates, [n, k·M] flattened per sentence (M per row)."""

    total: torch.Tensor  # log-probability of the continued hypothesis
    token: torch.Tensor
    row: torch.Tensor  # the cache row each continues
    bank: torch.Tensor  # constraint tokens produced
    pos: torch.Tensor  # [n, k·M, R] per spelling, after the token
    count: torch.Tensor  # [n, k·M, C] per term
    met: torch.Tensor  # [n, k·M, C]

    def flat(self) -> dict[str, torch.Tensor]:
        return {"total": self.total, "token": self.token, "row": self.row}

    def of(self, name: str, idx: torch.Tensor) -> torch.Tensor:
        """The state `name` of the candidates `idx` [n, j]: [n, j, R] or [n, j, C]."""
        state = getattr(self, name)
        return state.gather(1, idx.unsqueeze(2).expand(-1, -1, state.size(2)))


def _candidates(logits, norm, scores, state: _State, spelled: _Spelled, term_len, at_cap, eos):
    """The 2k best tokens of each open hypothesis plus the next token of each of its unmet
    constraints (not repeating one), with the constraint state each candidate leads to."""
    n, k = scores.shape
    met = state.met
    rows, c = met.shape
    width = min(2 * k, logits.size(-1))
    top_lp, top_tok = logits.topk(width, dim=-1)
    # Only a term's own spelling (the first C) is forced; the glued ones are only noticed.
    own, pos = spelled.terms[:, :c], state.pos[:, :c]
    want = own.gather(2, pos.clamp(max=own.size(2) - 1).unsqueeze(2)).squeeze(2)  # [N, C]
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
    new_pos, new_count = _after(tok, state, spelled, c)
    new_met = new_count >= state.need.unsqueeze(1)
    partial = torch.where(spelled.of_term(new_met), 0, new_pos).amax(2)
    bank = (new_count * term_len.unsqueeze(1)).sum(2) + partial

    m = lp.size(1)
    total = (scores.view(-1, 1) + lp).view(n, k * m)
    row = torch.arange(rows, device=logits.device).unsqueeze(1).expand(rows, m).reshape(n, k * m)
    flat = (
        bank.reshape(n, k * m),
        *(x.reshape(n, k * m, x.size(2)) for x in (new_pos, new_count, new_met)),
    )
    return _Candidates(total, tok.reshape(n, k * m), row, *flat)


def _after(tok, state: _State, spelled: _Spelled, c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each spelling's position [N, M, R] and each term's count [N, M, C] after each
    candidate token [N, M]."""
    terms, length = spelled.terms, spelled.length
    want = terms.gather(2, state.pos.clamp(max=terms.size(2) - 1).unsqueeze(2)).squeeze(2)
    x = tok.unsqueeze(2)  # [N, M, 1]
    advance = (x == want.unsqueeze(1)) & (state.pos > 0).unsqueeze(1)
    # A glued spelling starts only where no word character is right before it.
    may_start = ~spelled.glued | state.opens.unsqueeze(1)  # [N, R]
    restart = (x == terms[:, :, 0].unsqueeze(1)) & may_start.unsqueeze(1)
    new_pos = torch.where(advance, state.pos.unsqueeze(1) + 1, restart.long())
    lengths = length.unsqueeze(1)
    complete = spelled.to_terms((new_pos == lengths) & (lengths > 0), c)  # [N, M, C]
    count = state.count.unsqueeze(1) + (complete & ~state.met.unsqueeze(1)).long()
    # A completed term's own last token may start it again ("35 35 35" holds "35 35" twice).
    again = torch.minimum(restart.long(), (length - 1).clamp(min=0).unsqueeze(1))
    return torch.where(new_pos >= lengths, again, new_pos), count


def _allocation(total: torch.Tensor, bank: torch.Tensor, nb: int, free: int = 0) -> torch.Tensor:
    """Candidate indices [n, k·M] in dynamic-beam-allocation order: the `free` best by score
    whatever their bank, then the best of each bank (highest bank first), then the second best
    of each, …; impossible ones last.

    The `free` places keep the hypotheses plain beam search would keep: a term of four pieces
    makes five banks, more than a beam of four, and round robin alone then never reached bank 0,
    where the model's own translation waits until it writes the term itself."""
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
    # order[p] is the by_bank[p]-th best by score: the `free` best go first, in score order.
    key = torch.where(by_bank < free, by_bank - free, key)
    possible = total.gather(1, order) > -math.inf
    key = torch.where(possible, key, key.new_full((), torch.iinfo(torch.long).max))
    return order.gather(1, key.argsort(dim=1, stable=True))
