"""Label-smoothed cross-entropy over target tokens, padding ignored (§5.4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .tokenizer import PAD_ID


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float
) -> torch.Tensor:
    """Sum over real target tokens of the label-smoothed cross-entropy (ε = `smoothing`)."""
    # Softmax in float32 whatever the autocast dtype: the log-sum-exp over the vocabulary is where
    # bf16/fp16 lose the most.
    return F.cross_entropy(
        logits.flatten(0, -2).float(),
        target.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=smoothing,
        reduction="sum",
    )
