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


def set_peak_lr(scheduler: LambdaLR, lr: float) -> None:
    """Make `lr` the schedule's peak from the scheduler's current step on (a resumed run)."""
    scheduler.base_lrs = [lr] * len(scheduler.optimizer.param_groups)
    rates = [lr * f(scheduler.last_epoch) for f in scheduler.lr_lambdas]
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates
