"""Decoding: greedy search over a batch of sources."""

from __future__ import annotations

import torch

from .batching import no_peek_mask
from .model import Transformer
from .tokenizer import BOS_ID, EOS_ID, PAD_ID


def max_output_lengths(src_mask: torch.Tensor, a: float, b: int, cap: int) -> torch.Tensor:
    """Per-sentence output cap `a·src_len + b` tokens (EOS included), at most `cap`."""
    src_lens = src_mask.sum(dim=1).float()
    return (a * src_lens + b).floor().long().clamp(min=1, max=cap)


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """Most probable next token at each step; returns ids per sentence, EOS excluded."""
    memory = model.encode(src, src_mask)
    cap = model.cfg.max_positions - 1  # BOS takes one position
    limits = max_output_lengths(src_mask, max_len_a, max_len_b, cap)
    batch = src.size(0)
    ys = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    for t in range(int(limits.max())):
        states = model.decoder_states(ys, memory, src_mask, no_peek_mask(ys))
        next_ids = model.logits(states[:, -1]).argmax(dim=-1)
        # Finished sentences get padding; those reaching their length cap are ended with EOS.
        next_ids = torch.where(t + 1 >= limits, torch.full_like(next_ids, EOS_ID), next_ids)
        next_ids = next_ids.masked_fill(finished, PAD_ID)
        ys = torch.cat([ys, next_ids.unsqueeze(1)], dim=1)
        finished |= next_ids == EOS_ID
        if bool(finished.all()):
            break
    return [_until_eos(row) for row in ys[:, 1:].tolist()]


def _until_eos(ids: list[int]) -> list[int]:
    return ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
