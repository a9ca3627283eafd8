"""Decoding with the incremental (KV-cached) decoder: greedy search and batched beam search."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .model import DecoderCache, Transformer
from .tokenizer import BOS_ID, EOS_ID, PAD_ID

NEVER_GENERATED = [PAD_ID, BOS_ID]


@dataclass
class Hypothesis:
    """A finished translation: its tokens (EOS excluded) and scores."""

    tokens: list[int]
    score: float  # log-probability / length penalty: what search ranks by
    log_prob: float  # sum of the token log-probabilities, EOS included


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, §7); |Y| counts EOS."""
    return ((5 + length) / 6) ** alpha


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
    model: Transformer, ids: torch.Tensor, cache: DecoderCache
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the next token (PAD and BOS at -inf) and their log-normaliser, per row.

    log p(token) = logit − logsumexp(logits). Search only needs a handful of tokens per row,
    so it subtracts the normaliser from those instead of writing a full log-softmax.
    """
    logits = model.decode_step(ids, cache).float()
    norm = torch.logsumexp(logits, dim=-1)  # the model's own distribution, over every token
    logits[:, NEVER_GENERATED] = -math.inf  # padding and BOS are never outputs
    return logits, norm


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.0,
) -> list[Hypothesis]:
    """The most probable next token at every step, one hypothesis per sentence."""
    cache, limits = _start(model, src, src_mask, max_len_a, max_len_b)
    n, steps = src.size(0), int(limits.max())
    tokens = torch.full((n, steps), EOS_ID, dtype=torch.long, device=src.device)
    log_prob = torch.zeros(n, device=src.device)
    lengths = limits.clone()
    alive = torch.arange(n, device=src.device)  # sentences still decoding, by original index
    ids = torch.full((n,), BOS_ID, dtype=torch.long, device=src.device)
    for t in range(steps):
        logits, norm = _next_token_scores(model, ids, cache)
        # A sentence at its length cap may only end.
        next_ids = torch.where(t + 1 >= limits[alive], EOS_ID, logits.argmax(dim=-1))
        tokens[alive, t] = next_ids
        log_prob[alive] += logits.gather(1, next_ids.unsqueeze(1)).squeeze(1) - norm
        ended = next_ids == EOS_ID
        if bool(ended.any()):
            lengths[alive[ended]] = t + 1
            keep = (~ended).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            cache.keep(keep)
            alive, next_ids = alive[keep], next_ids[keep]
        ids = next_ids
    out = []
    for row, length, lp in zip(tokens.tolist(), lengths.tolist(), log_prob.tolist()):
        out.append(Hypothesis(row[: length - 1], lp / length_penalty(length, alpha), lp))
    return out


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    beam: int = 4,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.6,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """Batched beam search: the `nbest` best hypotheses of each sentence, best first.

    All sentences and their beams decode as one [sentences × beam] batch. A hypothesis that ends
    takes one of its sentence's `beam` slots for good, so beam 1 is exactly greedy search. A
    sentence stops when no open beam can still beat its n-th best finished hypothesis: with
    log-probabilities ≤ 0, an open beam's best possible score is its current log-probability
    over the length penalty at the length cap. One slot always follows the greedy path (the
    argmax continuation of the greedy prefix), so beam search never returns a lower model score
    than greedy search on the same input.
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")
    device = src.device
    batch, k = src.size(0), beam
    cache, limits = _start(model, src, src_mask, max_len_a, max_len_b, beam=k)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    active = torch.arange(batch, device=device)  # sentences still searching, by original index
    scores = torch.full((batch, k), -math.inf, device=device)  # log-probs of the open beams
    scores[:, 0] = 0.0  # one start hypothesis, so the first step's k picks are all distinct
    open_slots = torch.full((batch,), k, device=device)  # k minus hypotheses already finished
    greedy_slot = torch.zeros(batch, dtype=torch.long, device=device)  # -1: greedy has ended
    prefixes = torch.empty(batch * k, 0, dtype=torch.long, device=device)
    ids = torch.full((batch * k,), BOS_ID, dtype=torch.long, device=device)
    slots = torch.arange(k, device=device)
    for t in range(int(limits.max())):
        n = active.numel()
        logits, norm = _next_token_scores(model, ids, cache)
        vocab = logits.size(-1)
        # The best k of a sentence's k·V continuations are among each beam's own best k.
        per_row = min(k, vocab)
        row_best, row_token = logits.topk(per_row, dim=-1)  # sorted, best first
        row_best = (row_best - norm.unsqueeze(1)).view(n, k, per_row)
        row_token = row_token.view(n, k, per_row)
        at_cap = t + 1 >= limits[active]
        if bool(at_cap.any()):  # sentences at their length cap may only end
            eos = (logits[:, EOS_ID] - norm).view(n, k)
            row_best[at_cap] = -math.inf
            row_best[at_cap, :, 0] = eos[at_cap]
            row_token[at_cap] = EOS_ID
        candidates = (scores.unsqueeze(2) + row_best).view(n, k * per_row)
        top_scores, pick = candidates.topk(k, dim=1)
        top = (pick // per_row) * vocab + row_token.view(n, k * per_row).gather(1, pick)
        allowed = slots.unsqueeze(0) < open_slots.unsqueeze(1)

        # Keep the greedy continuation among the picks, in the last allowed slot if need be.
        rows = torch.arange(n, device=device)
        g_slot = greedy_slot.clamp(min=0)
        g_pick = g_slot * vocab + row_token[rows, g_slot, 0]  # a beam's best token
        missing = (greedy_slot >= 0) & ~((top == g_pick.unsqueeze(1)) & allowed).any(dim=1)
        if bool(missing.any()):
            last = (open_slots[missing] - 1).clamp(min=0)
            top[missing, last] = g_pick[missing]
            top_scores[missing, last] = (
                scores[missing, g_slot[missing]] + row_best[missing, g_slot[missing], 0]
            )

        valid = allowed & (top_scores > -math.inf)
        origin, token = top // vocab, top % vocab
        ended = valid & (token == EOS_ID)
        is_greedy = valid & (top == g_pick.unsqueeze(1)) & (greedy_slot >= 0).unsqueeze(1)
        greedy_slot = torch.where(
            (is_greedy & ~ended).any(dim=1), (is_greedy & ~ended).int().argmax(dim=1), -1
        )
        source_rows = (rows.unsqueeze(1) * k + origin).view(-1)
        if bool(ended.any()):
            length = t + 1
            lp = length_penalty(length, alpha)
            ii, jj = ended.nonzero(as_tuple=True)
            ends = prefixes[source_rows.view(n, k)[ii, jj]].tolist()
            for i, raw, toks in zip(ii.tolist(), top_scores[ii, jj].tolist(), ends):
                finished[int(active[i])].append(Hypothesis(toks, raw / lp, raw))
            open_slots = open_slots - ended.sum(dim=1)

        scores = torch.where(valid & ~ended, top_scores, -math.inf)
        prefixes = torch.cat([prefixes[source_rows], token.view(-1, 1)], dim=1)
        cache.reorder(source_rows)
        ids = token.view(-1)

        done = _done(scores, open_slots, finished, active, limits, alpha, nbest)
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            keep_rows = (keep.unsqueeze(1) * k + slots).view(-1)
            active, scores, open_slots = active[keep], scores[keep], open_slots[keep]
            greedy_slot, prefixes, ids = greedy_slot[keep], prefixes[keep_rows], ids[keep_rows]
            cache.keep(keep)
    return [sorted(h, key=lambda x: x.score, reverse=True)[:nbest] for h in finished]


def _done(scores, open_slots, finished, active, limits, alpha, nbest) -> torch.Tensor:
    """Which sentences can stop: no open beam left, or none that can beat the n-th best."""
    no_open = (open_slots <= 0) | ~torch.isfinite(scores).any(dim=1)
    best_open = scores.max(dim=1).values.tolist()
    done = no_open.tolist()
    for i, sentence in enumerate(active.tolist()):
        kept = finished[sentence]
        if done[i] or len(kept) < nbest:
            continue
        nth = sorted((h.score for h in kept), reverse=True)[nbest - 1]
        # The longest an open beam may grow is the cap, where the penalty divides the most.
        bound = best_open[i] / length_penalty(int(limits[sentence]), alpha)
        done[i] = bound <= nth
    return torch.tensor(done, device=scores.device)
