"""Decoding with the incremental (KV-cached) decoder: greedy search and batched beam search,
behind one entry, `decode(model, src, options)`, that every job (evaluate, translate, serve,
validation) calls.

Both keep their state on the device and read back one thing per step, which sentences are still
decoding (to drop the finished ones from the batch), so a GPU waits for the host at most once a
step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import padding_mask
from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds
from seq2seq.model.transformer import DecoderCache, Transformer

NEVER_GENERATED = list(DEFAULT_IDS.never_generated)  # padding and BOS, with the default ids
LENGTH_NORMS = ("gnmt", "length")


class SearchError(ValueError):
    """Search found no hypothesis for a sentence: the model's scores were not finite."""

    def __init__(self, sentences: list[int]):
        super().__init__(f"no finite-scored hypothesis for sentence(s) {sentences}")
        self.sentences = sentences


@dataclass
class Hypothesis:
    """A finished translation: its tokens (EOS excluded) and scores."""

    tokens: list[int]
    score: float  # log-probability / length penalty: what search ranks by
    log_prob: float  # sum of the token log-probabilities, EOS included


def length_penalty(length, alpha: float, norm: str = "gnmt"):
    """The divisor of a hypothesis's log-probability; `length` |Y| counts EOS.

    `gnmt`: ((5 + |Y|) / 6)^α, GNMT's (Wu et al. 2016, §7), which the paper uses (§6.1);
    `length`: |Y|^α, as fairseq, Hugging Face `generate` and Marian's `--normalize` divide.
    """
    if norm == "gnmt":
        return ((5 + length) / 6) ** alpha
    if norm == "length":
        return length**alpha
    raise ValueError(f"length_norm must be one of {LENGTH_NORMS}, not {norm!r}")


# Which sentences of a batch nobody waits for any more (a server's client went away): asked
# every POLL_STEPS steps, a Python call and no device sync; those sentences stop there and get
# an empty hypothesis.
Dropped = Callable[[], Sequence[bool]]
POLL_STEPS = 8


def decode(
    model: Transformer,
    src: torch.Tensor,
    options: DecodeConfig,
    *,
    special: SpecialIds = DEFAULT_IDS,
    dropped: Dropped | None = None,
    constraints: list[tuple[tuple[int, ...], ...]] | None = None,
    glue: torch.Tensor | None = None,
    first: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """The `options.nbest` best hypotheses of each sentence of a padded source batch [B, S],
    best first: greedy search for beam 1, beam search otherwise, constrained beam search when
    a sentence has `constraints` (target token sequences its output must hold; `glue`: the
    target pieces that continue a word, kept from right after a term). A new decoding mode is
    a branch here and a field of DecodeConfig. `first` [B]: each sentence's first output token,
    forced (a target language token, as `generate`'s forced_bos_token_id; log-probability 0)."""
    src_mask = padding_mask(src, special.pad)
    caps = {"max_len_a": options.max_len_a, "max_len_b": options.max_len_b}
    if constraints is not None and any(constraints):
        if first is not None:
            from seq2seq.errors import UserError

            raise UserError(
                "terminology constraints are not supported yet with a model that forces a "
                "target-language token (M2M100/NLLB): drop --glossary/--constraints"
            )
        from seq2seq.decode.constrained import constrained_beam_search  # it builds on this module

        return constrained_beam_search(
            model,
            src,
            src_mask,
            constraints,
            beam=options.beam_size,
            **caps,
            alpha=options.length_penalty,
            nbest=options.nbest,
            length_norm=options.length_norm,
            special=special,
            glue=glue,
        )
    caps["dropped"] = dropped  # constrained search decodes a batch whole
    if options.beam_size == 1:
        found = greedy(
            model,
            src,
            src_mask,
            **caps,
            alpha=options.length_penalty,
            length_norm=options.length_norm,
            special=special,
            first=first,
        )
        return [[h] for h in found]
    return beam_search(
        model,
        src,
        src_mask,
        beam=options.beam_size,
        **caps,
        alpha=options.length_penalty,
        nbest=options.nbest,
        length_norm=options.length_norm,
        special=special,
        first=first,
    )


def max_output_lengths(src_mask: torch.Tensor, a: float, b: int, cap: int) -> torch.Tensor:
    """Per-sentence output cap `a·src_len + b` tokens (EOS included), at most `cap`."""
    src_lens = src_mask.sum(dim=1).float()
    return (a * src_lens + b).floor().long().clamp(min=1, max=cap)


def _start(model, src, src_mask, a: float, b: int, beam: int = 1):
    memory = model.encode(src, src_mask)
    # The BOS position takes one slot of the positional table.
    limits = max_output_lengths(src_mask, a, b, model.cfg.max_positions - 1)
    return model.start_decoding(memory, src_mask, beam), limits


def _next_token_scores(
    model: Transformer, ids: torch.Tensor, cache: DecoderCache, never: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the next token (`never`, e.g. PAD and BOS, at -inf) and their log-normaliser,
    per row.

    log p(token) = logit − logsumexp(logits). Search only needs a handful of tokens per row,
    so it subtracts the normaliser from those instead of writing a full log-softmax.
    """
    logits = model.decode_step(ids, cache).float()
    norm = torch.logsumexp(logits, dim=-1)  # the model's own distribution, over every token
    logits.index_fill_(1, never, -math.inf)  # padding, BOS, a start token: never outputs
    return logits, norm


def _forced(logits: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores where each row's only possible token is `first[row]`, at log-probability 0."""
    forced = torch.full_like(logits, -math.inf).scatter_(1, first.unsqueeze(1), 0.0)
    return forced, torch.zeros(logits.size(0), device=logits.device)


def _still_decoding(done: torch.Tensor) -> torch.Tensor:
    """Indices of the rows not done: the step's one read-back from the device."""
    return (~done).nonzero().squeeze(1)


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.0,
    length_norm: str = "gnmt",
    special: SpecialIds = DEFAULT_IDS,
    dropped: Dropped | None = None,
    first: torch.Tensor | None = None,
) -> list[Hypothesis]:
    """The most probable next token at every step, one hypothesis per sentence."""
    eos = special.eos
    cache, limits = _start(model, src, src_mask, max_len_a, max_len_b)
    n, steps = src.size(0), int(limits.max())
    # On the device once, not once a step.
    never = torch.tensor(special.never_generated, dtype=torch.long, device=src.device)
    tokens = torch.full((n, steps), eos, dtype=torch.long, device=src.device)
    log_prob = torch.zeros(n, device=src.device)
    lengths = limits.clone()
    alive = torch.arange(n, device=src.device)  # sentences still decoding, by original index
    ids = torch.full((n,), special.start, dtype=torch.long, device=src.device)
    for t in range(steps):
        logits, norm = _next_token_scores(model, ids, cache, never)
        if t == 0 and first is not None:
            logits, norm = _forced(logits, first.to(src.device))
        # A sentence at its length cap may only end.
        next_ids = torch.where(t + 1 >= limits[alive], eos, logits.argmax(dim=-1))
        tokens[alive, t] = next_ids
        log_prob[alive] += logits.gather(1, next_ids.unsqueeze(1)).squeeze(1) - norm
        ended = next_ids == eos
        ended = _drop(ended, dropped, t, alive)
        keep = _still_decoding(ended)
        if keep.numel() < alive.numel():  # known from the step's one read-back
            lengths[alive[ended]] = t + 1
            if keep.numel() == 0:
                break
            cache.keep(keep)
            alive, next_ids = alive[keep], next_ids[keep]
        ids = next_ids
    out = [
        Hypothesis(row[: length - 1], lp / length_penalty(length, alpha, length_norm), lp)
        for row, length, lp in zip(tokens.tolist(), lengths.tolist(), log_prob.tolist())
    ]
    bad = [i for i, h in enumerate(out) if not math.isfinite(h.log_prob)]
    if bad:
        raise SearchError(bad)
    return out


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    beam: int = 4,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.6,
    nbest: int = 1,
    length_norm: str = "gnmt",
    special: SpecialIds = DEFAULT_IDS,
    dropped: Dropped | None = None,
    first: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search as Hugging Face `generate` runs it (`early_stopping=True`); the
    `nbest` best hypotheses of each sentence, best first.

    All sentences and their beams decode as one [sentences × beam] batch. Each step ranks the
    2k best continuations of a sentence's k open hypotheses: those that end (EOS) within the
    first k join its finished hypotheses, of which the best k (by length-normalised score) are
    kept, and the best k that do not end go on, so the beam stays k wide. A sentence stops once
    it has k finished hypotheses, or at its length cap, where every open hypothesis must end.
    fairseq differs only in never replacing a finished hypothesis by a better one found in the
    same step as the k-th. Beam 1 is exactly greedy search.
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")
    length_penalty(1, alpha, length_norm)  # reject an unknown norm before any work
    eos, device = special.eos, src.device
    batch, k = src.size(0), beam
    cache, limits = _start(model, src, src_mask, max_len_a, max_len_b, beam=k)
    steps = int(limits.max())
    never = torch.tensor(special.never_generated, dtype=torch.long, device=device)
    finished = _Finished.empty(batch, k, steps, device)
    active = torch.arange(batch, device=device)  # sentences still searching, by original index
    scores = torch.full((batch, k), -math.inf, device=device)  # log-probs of the open beams
    scores[:, 0] = 0.0  # one start hypothesis, so the first step's picks are all distinct
    history = torch.empty(batch * k, 0, dtype=torch.long, device=device)  # open beams' tokens
    ids = torch.full((batch * k,), special.start, dtype=torch.long, device=device)
    for t in range(steps):
        n = active.numel()
        logits, norm = _next_token_scores(model, ids, cache, never)
        if t == 0 and first is not None:  # every sentence is still active at the first step
            logits, norm = _forced(logits, first.to(device).repeat_interleave(k))
        at_cap = (t + 1 >= limits[active]).view(n, 1, 1)
        top_scores, token, source_rows = _best_continuations(logits, norm, scores, at_cap, eos, k)
        ends = token == eos

        # Candidates ending within the first k ranks join the finished ones; the best k stay.
        top_k = top_scores[:, :k]
        finish = ends[:, :k] & (top_k > -math.inf)
        new_score = torch.where(
            finish, top_k / length_penalty(t + 1, alpha, length_norm), -math.inf
        )
        new_tokens = torch.zeros(n, k, steps, dtype=torch.long, device=device)
        if t:  # their prefixes (EOS is implied by the length)
            new_tokens[:, :, :t] = history[source_rows[:, :k].reshape(-1)].view(n, k, t)
        best = finished.add(active, new_score, top_k, length=t + 1, tokens=new_tokens)

        # The best k candidates that do not end go on (stable: in score order).
        go = ends.to(torch.int8).argsort(dim=1, stable=True)[:, :k]
        scores = torch.where(ends.gather(1, go), -math.inf, top_scores.gather(1, go))
        rows = source_rows.gather(1, go).view(-1)
        ids = token.gather(1, go).view(-1)
        history = torch.cat([history[rows], ids.unsqueeze(1)], dim=1)
        cache.reorder(rows)

        # Done: k finished, at the cap, or no open hypothesis left.
        done = (best[:, -1] > -math.inf) | (t + 1 >= limits[active]) | ~(scores > -math.inf).any(1)
        done = _drop(done, dropped, t, active)
        keep = _still_decoding(done)
        if keep.numel() == 0:
            break
        if keep.numel() < n:
            keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            active, scores = active[keep], scores[keep]
            history, ids = history[keep_rows], ids[keep_rows]
            cache.keep(keep)
    return _ranked(finished, nbest, dropped=[] if dropped is None else dropped())


def _drop(done: torch.Tensor, dropped: Dropped | None, t: int, rows: torch.Tensor):
    """`done` [rows], with the sentences nobody waits for any more, asked every POLL_STEPS
    steps (`rows`: original sentence indices, on the device)."""
    if dropped is None or t % POLL_STEPS != POLL_STEPS - 1:
        return done
    gone = torch.tensor(list(dropped()), dtype=torch.bool)
    return done | gone.to(rows.device, non_blocking=True)[rows]


def _best_continuations(
    logits: torch.Tensor,
    norm: torch.Tensor,
    scores: torch.Tensor,
    at_cap: torch.Tensor,
    eos: int,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 2k best continuations of each sentence's k open beams: their log-probabilities
    [n, 2k], tokens [n, 2k] and the cache rows they continue [n, 2k]."""
    n = scores.size(0)
    # The best 2k of a sentence's k·V continuations are among each beam's own best 2k.
    width = min(2 * k, logits.size(-1))
    row_best, row_token = logits.topk(width, dim=-1)  # sorted, best first
    row_best = (row_best - norm.unsqueeze(1)).view(n, k, width)
    row_token = row_token.view(n, k, width)
    # A sentence at its length cap may only end: each beam's one candidate is EOS.
    eos_scores = (logits[:, eos] - norm).view(n, k, 1)
    only_eos = torch.where(torch.arange(width, device=logits.device) == 0, eos_scores, -math.inf)
    row_best = torch.where(at_cap, only_eos, row_best)
    row_token = torch.where(at_cap, eos, row_token)

    candidates = (scores.unsqueeze(2) + row_best).view(n, k * width)
    top_scores, pick = candidates.topk(min(2 * k, k * width), dim=1)
    origin = pick // width  # the beam each candidate continues
    token = row_token.view(n, k * width).gather(1, pick)
    source_rows = torch.arange(n, device=logits.device).unsqueeze(1) * k + origin
    return top_scores, token, source_rows


@dataclass
class _Finished:
    """The k best finished hypotheses of each sentence, by original index, best first
    (score -inf: an empty slot)."""

    score: torch.Tensor  # [B, k] length-normalised
    log_prob: torch.Tensor  # [B, k]
    length: torch.Tensor  # [B, k], EOS included
    tokens: torch.Tensor  # [B, k, steps]

    @classmethod
    def empty(cls, batch: int, k: int, steps: int, device: torch.device) -> _Finished:
        return cls(
            torch.full((batch, k), -math.inf, device=device),
            torch.zeros(batch, k, device=device),
            torch.ones(batch, k, dtype=torch.long, device=device),
            torch.zeros(batch, k, steps, dtype=torch.long, device=device),
        )

    def add(
        self,
        active: torch.Tensor,
        score: torch.Tensor,
        log_prob: torch.Tensor,
        *,
        length: int,
        tokens: torch.Tensor,
    ) -> torch.Tensor:
        """Merge new finished hypotheses [n, k] of the `active` sentences, keep the best k of
        each; return their scores [n, k]."""
        best, order = torch.cat([self.score[active], score], dim=1).topk(score.size(1), dim=1)
        lengths = torch.full_like(log_prob, length, dtype=torch.long)
        self.score[active] = best
        self.log_prob[active] = torch.cat([self.log_prob[active], log_prob], 1).gather(1, order)
        self.length[active] = torch.cat([self.length[active], lengths], 1).gather(1, order)
        by_order = order.unsqueeze(2).expand(-1, -1, self.tokens.size(2))
        self.tokens[active] = torch.cat([self.tokens[active], tokens], 1).gather(1, by_order)
        return best


def _ranked(
    finished: _Finished, nbest: int, dropped: Sequence[bool] = ()
) -> list[list[Hypothesis]]:
    """Each sentence's `nbest` best finished hypotheses, best first (one device read); a
    dropped sentence without any gets an empty one."""
    out, empty = [], []
    f = finished
    rows = zip(f.score.tolist(), f.log_prob.tolist(), f.length.tolist(), f.tokens.tolist())
    for i, (s, lp, lengths, toks) in enumerate(rows):
        hyps = [
            Hypothesis(toks[j][: lengths[j] - 1], s[j], lp[j])
            for j in range(len(s))
            if s[j] > -math.inf
        ]
        if not hyps and i < len(dropped) and dropped[i]:
            hyps = [Hypothesis([], 0.0, 0.0)]
        out.append(hyps[:nbest])  # already best first
        if not hyps:
            empty.append(i)
    if empty:
        raise SearchError(empty)
    return out
