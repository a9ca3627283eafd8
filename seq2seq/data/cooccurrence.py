"""Sentence co-occurrence counting shared by the lexical shortlist (token ids) and the term
dictionary (words): every (source, target) pair of each sentence pair as one int64 key."""

from __future__ import annotations

import torch


def flat_sets(sets: list[set[int]] | list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids of every set, one after another, and each set's size."""
    flat = torch.tensor([i for ids in sets for i in ids], dtype=torch.long)
    return flat, torch.tensor([len(ids) for ids in sets], dtype=torch.long)


def pair_keys(s_flat, s_len, t_flat, t_len, vt: int) -> torch.Tensor:
    """source·vt + target of every (source, target) pair of each sentence, all sentences (the
    sentences' ids one after another, `*_len` ids each)."""
    sentence = torch.repeat_interleave(torch.arange(s_len.numel()), s_len)
    reps = t_len[sentence]  # each source token pairs with its sentence's target tokens
    block = torch.cumsum(reps, 0) - reps
    j = torch.arange(int(reps.sum())) - torch.repeat_interleave(block, reps)
    t_first = torch.cumsum(t_len, 0) - t_len
    t_idx = torch.repeat_interleave(t_first[sentence], reps) + j
    return torch.repeat_interleave(s_flat, reps) * vt + t_flat[t_idx]
