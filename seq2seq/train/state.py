"""Where training is, and the trainer state a checkpoint saves beside the weights: written and
read back here, so that a resumed run continues exactly (checkpoints of older runs included)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from seq2seq.train import distributed

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TrainState:
    """Where training is: enough, with the checkpointed tensors, to continue exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` consumed (by all processes together)
    best_bleu: float | None = None
    best_loss: float | None = None
    bad_evals: int = 0  # validations in a row without a new best (early stopping)
    stage: int = 0  # which of train.stages (0 without stages)
    stage_from: int = 0  # the step that stage started at
    stopped_by: str | None = field(default=None, compare=False)  # signal name, if any


def snapshot(
    *,
    state: TrainState,
    optimizer: torch.optim.Optimizer,
    scheduler,
    scaler: torch.amp.GradScaler,
    rng: list[dict[str, Any]],
    raw_weights: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """The trainer state of a checkpoint: `rng` holds every process's random state;
    `raw_weights` the weights training goes on from when the weights file holds their EMA."""
    saved = {
        "train": asdict(state, dict_factory=_without_runtime_fields),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng,
    }
    if raw_weights is not None:
        saved["raw_weights"] = raw_weights
    return saved


def restore(
    saved: dict[str, Any],
    *,
    optimizer: torch.optim.Optimizer,
    scheduler,
    scaler: torch.amp.GradScaler,
    info: distributed.Dist,
) -> TrainState:
    """Load a snapshot into the optimizer, schedule, scaler and this process's RNG; return the
    saved TrainState. Raises KeyError, TypeError, ValueError or RuntimeError if it is not one."""
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    if saved["scaler"] and scaler.is_enabled():  # empty when saved without fp16
        scaler.load_state_dict(saved["scaler"])
    state = TrainState(**saved["train"])
    set_rng_state(saved["rng"], info)
    return state


def _without_runtime_fields(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v for k, v in items if k != "stopped_by"}


def rng_state() -> dict[str, Any]:
    """This process's random state: its dropout stream."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(saved: list[dict[str, Any]] | dict[str, Any], info: distributed.Dist) -> None:
    """Restore this process's share of saved random states (one dict: an older checkpoint's)."""
    states = saved if isinstance(saved, list) else [saved]
    if len(states) != info.world_size:
        log.warning(
            "the checkpoint was saved by %d processes, this run has %d: dropout streams restart",
            len(states),
            info.world_size,
        )
        return
    mine = states[info.rank]
    torch.set_rng_state(mine["torch"])
    if "cuda" in mine and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(mine["cuda"])
