"""Updates whose loss or gradient is not finite: each is skipped and logged; too many in a row
end training, with a message that says what to change."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from seq2seq.errors import UserError
from seq2seq.run.runlog import json_number
from seq2seq.train import distributed
from seq2seq.train.state import TrainState

log = logging.getLogger(__name__)


@dataclass
class NonFinite:
    """Skipped updates in a row, and whether a loss or a gradient made them non-finite."""

    limit: int  # train.max_nonfinite: this many in a row stop training
    in_a_row: int = 0
    kinds: set[str] = field(default_factory=set)

    @property
    def too_many(self) -> bool:
        """Whether training must stop."""
        return self.in_a_row >= self.limit

    def reset(self) -> None:
        """A good update ends the run of skipped ones."""
        self.in_a_row = 0
        self.kinds.clear()

    def skipped(
        self,
        *,
        loss: torch.Tensor,
        grad_norm: float,
        global_tokens: float,
        state: TrainState,
        info: distributed.Dist,
        device: torch.device,
        fp16: bool,
    ) -> dict[str, Any] | None:
        """Count an update skipped for its non-finite gradient and warn; return its metrics
        record, or None for an fp16 overflow (the loss scaler's business, not a fault)."""
        # Every process is here together, so one more small collective on this rare path
        # tells whose loss was not finite.
        local = loss.item()
        loss_sum, bad_losses = distributed.all_sum(
            [local, float(not math.isfinite(local))], info, device
        )
        if fp16 and not bad_losses:
            return None
        self.in_a_row += 1
        self.kinds.add("loss" if bad_losses else "gradient")
        per_token = loss_sum / global_tokens
        why = f"loss {per_token}" if bad_losses else f"gradient norm {grad_norm}"
        log.warning(
            "update after step %d skipped, weights unchanged: non-finite %s (%d in a row; %d stop "
            "training)",
            state.step,
            why,
            self.in_a_row,
            self.limit,
        )
        return {
            "event": "nonfinite",
            "loss": json_number(per_token),
            "grad_norm": json_number(grad_norm),
            "in_a_row": self.in_a_row,
            "epoch": state.epoch,
            "batch_in_epoch": state.batch_in_epoch,
        }

    def error(self, step: int, clip_norm: float, fp16: bool) -> UserError:
        """Why training stopped at `step`, and what to change."""
        kinds = {"loss": "losses", "gradient": "gradients"}
        what = " or ".join(kinds[k] for k in sorted(self.kinds, reverse=True))
        # A resumed run restores its saved schedule, so a lower lr needs a fresh run.
        fixes = ["start a fresh run with a lower train.lr"]
        if clip_norm == 0:
            fixes.append("enable clipping (train.clip_norm)")
        if fp16:
            fixes.append("train with bf16 or fp32 (train.precision)")
        return UserError(
            f"training stopped at step {step}: {self.in_a_row} non-finite {what} in a row "
            f"(last good state saved at step {step}); {', '.join(fixes)} or check the data"
        )
