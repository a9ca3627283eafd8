"""Learning-rate schedule: linear warm-up then inverse square root decay (§5.3)."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def inverse_sqrt(step: int, warmup: int) -> float:
    """Multiplier of the peak rate at optimizer step `step` (1-based); 1.0 at the end of warm-up.

    §5.3: lrate ∝ min(step^-0.5, step · warmup^-1.5), rescaled so that its peak is 1.
    """
    step = max(step, 1)
    if warmup == 0:
        return 1.0 / math.sqrt(step)
    return min(step / warmup, math.sqrt(warmup / step))


def inverse_sqrt_scheduler(optimizer: torch.optim.Optimizer, warmup: int) -> LambdaLR:
    """LambdaLR whose k-th optimizer step uses `inverse_sqrt(k)` × the peak rate."""
    # LambdaLR evaluates the lambda at 0 before the first step, so shift by one.
    return LambdaLR(optimizer, lambda epoch: inverse_sqrt(epoch + 1, warmup))
