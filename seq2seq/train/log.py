"""The "train" records of the metrics log: what the updates of a window (log_every steps) add
up to, summed over processes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from seq2seq.run.runlog import MetricsLog, memory
from seq2seq.train import distributed


@dataclass
class LogWindow:
    """Loss, tokens and training time since the last train record, and the last update's
    gradient norm and learning rate."""

    device: torch.device
    # Loss and gradient norm stay on the device so an update never waits for a .item().
    loss: torch.Tensor = field(init=False)
    grad_norm: torch.Tensor = field(init=False)
    lr: float = field(init=False, default=0.0)  # the rate the last update used
    tokens: float = field(init=False, default=0.0)  # target tokens, global: all processes
    local_tokens: int = field(init=False, default=0)
    start: float = field(init=False, default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.grad_norm = torch.zeros((), device=self.device)

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor, lr: float) -> None:
        """An update about to be applied: its summed loss, gradient norm and rate."""
        self.loss += loss
        self.grad_norm = grad_norm
        self.lr = lr

    def count(self, global_tokens: float, local_tokens: int) -> None:
        """The target tokens of an applied update: all processes', and this one's."""
        self.tokens += global_tokens
        self.local_tokens += local_tokens

    def pause(self, seconds: float) -> None:
        """Leave out time spent on something else (validation): tok/s counts training only."""
        self.start += seconds

    def record(self, info: distributed.Dist, epoch: int) -> tuple[dict[str, Any], str]:
        """The window's train record, and a short summary of it for the progress bar."""
        elapsed = time.perf_counter() - self.start
        loss_sum, _ = distributed.all_sum([self.loss.item(), self.local_tokens], info, self.device)
        loss = loss_sum / max(self.tokens, 1)
        tok_s = self.tokens / elapsed if elapsed > 0 else 0.0
        record = {
            "split": "train",
            "loss": loss,
            "lr": self.lr,
            "tokens_per_s": tok_s,
            "tokens": self.tokens,  # target tokens of this window (all processes)
            "grad_norm": self.grad_norm.item(),
            "epoch": epoch,
            **memory(self.device),
        }
        return record, f"loss={loss:.3f} lr={self.lr:.2e} tok/s={tok_s:,.0f}"

    def reset(self) -> None:
        """Start a new window."""
        self.loss.zero_()
        self.tokens = 0.0
        self.local_tokens = 0
        self.start = time.perf_counter()

    def write(self, metrics: MetricsLog, step: int, info: distributed.Dist, epoch: int) -> str:
        """Write the window's train record at `step` and start a new window; return its
        summary for the progress bar."""
        record, summary = self.record(info, epoch)
        metrics.write(step, record)
        self.reset()
        return summary
