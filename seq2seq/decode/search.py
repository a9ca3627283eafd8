"""Decoding with the incremental (KV-cached) decoder, behind one entry, `decode(model, src,
options)`, that every job (evaluate, translate, serve, validation) calls: greedy search for
beam 1 (or sampling, sampling.py), else the one beam loop (beam.py) with the strategy a batch
needs: plain, or constrained by target terms (constrained.py), for the sentences whose plain
beam output lacks one of their terms (the others keep that output: a glossary never changes a
sentence that already holds its terms).

Both keep their state on the device and read back one thing per step, which sentences are still
decoding (to drop the finished ones from the batch), so a GPU waits for the host at most once a
step.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import padding_mask
from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds
from seq2seq.decode.beam import PlainBeam, beam_loop
from seq2seq.decode.constrained import ConstrainedBeam, Spellings, Terms, holds_terms
from seq2seq.decode.hypothesis import (
    ConstrainedHypothesis,
    Hypothesis,
    SearchError,
    length_penalty,
)
from seq2seq.decode.sampling import Choose, argmax, sampler
from seq2seq.decode.step import (
    Dropped,
    Settings,
    forced,
    next_token_scores,
    poll_dropped,
    positions,
    present,
    start,
    still_decoding,
)
from seq2seq.errors import UserError
from seq2seq.model.transformer import Transformer


def decode(
    model: Transformer,
    src: torch.Tensor,
    options: DecodeConfig,
    *,
    special: SpecialIds = DEFAULT_IDS,
    dropped: Dropped | None = None,
    constraints: Terms | None = None,
    glue: torch.Tensor | None = None,
    first: torch.Tensor | None = None,
    spellings: Spellings | None = None,
    rows: torch.Tensor | None = None,
    streams: list[tuple[int, int]] | None = None,
) -> list[list[Hypothesis]]:
    """The `options.nbest` best hypotheses of each sentence of a padded source batch [B, S],
    best first: greedy search for beam 1, beam search otherwise, constrained beam search when
    a sentence has `constraints` (target token sequences its output must hold; `glue`: the
    target pieces that continue a word, kept from right after a term; `spellings`: the terms'
    glued segmentations, counted too). A new decoding mode is
    a strategy for the beam loop and a field of DecodeConfig. `first` [B]: each sentence's
    first output token, forced (a target language token, as `generate`'s
    forced_bos_token_id; log-probability 0). `dropped`: see step.Dropped. `rows`: a
    shortlist's sorted target ids (EOS and the `first` tokens among them), the only ones
    scored; a constrained batch scores the whole vocabulary (its terms stay reachable).
    `streams`: each sentence's (line number, sentence of the line), which its samples are
    drawn from with `options.sampling` (default: (row, 0))."""
    src_mask = padding_mask(src, special.pad)
    settings = Settings(
        beam=options.beam_size,
        nbest=options.nbest,
        max_len_a=options.max_len_a,
        max_len_b=options.max_len_b,
        alpha=options.length_penalty,
        length_norm=options.length_norm,
        special=special,
        dropped=dropped,
    )
    if constraints is not None and any(constraints):
        if first is not None:
            raise UserError(
                "terminology constraints are not supported yet with a model that forces a "
                "target-language token (M2M100/NLLB): drop --glossary/--constraints"
            )
        return constrained_beam_search(
            model, src, src_mask, constraints, settings, glue=glue, spellings=spellings
        )
    if options.beam_size == 1:
        streams = streams or [(i, 0) for i in range(src.size(0))]
        choose = sampler(options.sampling, options.seed, streams, src.device)
        found = greedy(model, src, src_mask, settings, first=first, rows=rows, choose=choose)
        return [[h] for h in found]
    return beam_search(model, src, src_mask, settings, first=first, rows=rows)


def beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    settings: Settings,
    *,
    first: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search as Hugging Face `generate` runs it (`early_stopping=True`); the
    `nbest` best hypotheses of each sentence, best first (beam.PlainBeam; `rows`: a
    shortlist's sorted target ids, the only ones scored)."""
    strategy = PlainBeam(settings.special.eos, rows)
    return beam_loop(model, src, src_mask, strategy, settings, first=first, scored=rows)


def constrained_beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    constraints: Terms,
    settings: Settings,
    *,
    glue: torch.Tensor | None = None,
    spellings: Spellings | None = None,
) -> list[list[Hypothesis]]:
    """Beam search whose outputs hold each sentence's constraints (token-id sequences); the
    `nbest` best of each sentence, best first. The plain beam runs first, with the same
    settings: a sentence whose outputs already hold its terms (constrained.holds_terms) is
    answered with them, text and score, so a glossary never changes it; only the others are
    searched with constraints (constrained.ConstrainedBeam)."""
    if settings.beam < 2:
        raise ValueError("constrained decoding needs a beam size of at least 2")
    plain = beam_search(model, src, src_mask, settings)
    outputs = [[h.tokens for h in hyps] for hyps in plain]
    held = holds_terms(outputs, constraints, spellings, glue)
    found: list[list[Hypothesis]] = [
        [ConstrainedHypothesis(h.tokens, h.score, h.log_prob, plain=True) for h in hyps]
        for hyps in plain
    ]
    rest = [i for i, ok in enumerate(held) if not ok]
    if rest:
        searched = _search_rows(model, src, src_mask, constraints, rest, glue, spellings, settings)
        for i, hyps in zip(rest, searched):
            found[i] = hyps
    return found


def _search_rows(model, src, src_mask, constraints, rest, glue, spellings, settings: Settings):
    """Constrained search of the batch's sentences `rest` only."""
    terms, spelled = [constraints[i] for i in rest], _rows_of(spellings, rest)
    strategy = ConstrainedBeam(terms, settings, glue=glue, spellings=spelled)
    rows = torch.tensor(rest, device=src.device)
    if settings.dropped is not None:
        settings = replace(settings, dropped=partial(_dropped_rows, settings.dropped, rest))
    try:
        return beam_loop(model, src[rows], src_mask[rows], strategy, settings)
    except SearchError as e:  # its sentences are numbered within the rows searched
        raise SearchError([rest[i] for i in e.sentences]) from None


def _rows_of(spellings: Spellings | None, rows: list[int]) -> Spellings | None:
    """`spellings` for the batch's `rows` only (its sentence ends are per sentence)."""
    if spellings is None or not spellings.ends:
        return spellings
    return replace(spellings, ends=tuple(spellings.ends[i] for i in rows))


def _dropped_rows(dropped: Dropped, rows: list[int]) -> list[bool]:
    gone = list(dropped())
    return [gone[i] for i in rows]


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    settings: Settings,
    *,
    first: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    choose: Choose = argmax,
) -> list[Hypothesis]:
    """The most probable next token at every step (or the one `choose` samples), one hypothesis
    per sentence (`rows`: the sorted target ids a shortlist scores, EOS and the `first` tokens
    among them)."""
    special, dropped, device = settings.special, settings.dropped, src.device
    eos = special.eos
    cache, limits, steps = start(model, src, src_mask, settings.max_len_a, settings.max_len_b)
    n = src.size(0)
    # On the device once, not once a step.
    never = present(rows, torch.tensor(special.never_generated, dtype=torch.long, device=device))
    eos_column = eos if rows is None else int(positions(rows, torch.tensor(eos, device=device)))
    tokens = torch.full((n, steps), eos, dtype=torch.long, device=device)
    log_prob = torch.zeros(n, device=device)
    lengths = limits.clone()
    alive = torch.arange(n, device=device)  # sentences still decoding, by original index
    alive_limits = limits  # their output caps
    ids = torch.full((n,), special.start, dtype=torch.long, device=device)
    width = 1 if choose is argmax else 0  # the best column comes with the normaliser
    for t in range(steps):
        logits, norm, best = next_token_scores(model, ids, cache, never, rows, width)
        if t == 0 and first is not None:
            (logits, norm), best = forced(logits, positions(rows, first.to(device))), None
        chosen = best[1][:, 0] if best is not None else choose(logits, alive, t)
        # A sentence at its length cap may only end.
        column = torch.where(t + 1 >= alive_limits, eos_column, chosen)
        next_ids = column if rows is None else rows[column]
        tokens[alive, t] = next_ids
        log_prob[alive] += logits.gather(1, column.unsqueeze(1)).squeeze(1) - norm
        ended = next_ids == eos
        ended = poll_dropped(ended, dropped, t, alive)
        keep = still_decoding(ended)
        if keep.numel() < alive.numel():  # known from the step's one read-back
            lengths[alive[ended]] = t + 1
            if keep.numel() == 0:
                break
            cache.keep(keep)
            alive, alive_limits, next_ids = alive[keep], alive_limits[keep], next_ids[keep]
        ids = next_ids
    return _finished(tokens, lengths, log_prob, settings.alpha, settings.length_norm)


def _finished(tokens, lengths, log_prob, alpha: float, length_norm: str) -> list[Hypothesis]:
    """Greedy's hypotheses from its token, length and log-probability tensors; a sentence
    whose score is not finite is a SearchError."""
    out = [
        Hypothesis(row[: length - 1], lp / length_penalty(length, alpha, length_norm), lp)
        for row, length, lp in zip(tokens.tolist(), lengths.tolist(), log_prob.tolist())
    ]
    bad = [i for i, h in enumerate(out) if not math.isfinite(h.log_prob)]
    if bad:
        raise SearchError(bad)
    return out
