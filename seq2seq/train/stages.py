"""Curriculum stages (`train.stages`): the data mix of the stage a run is in, when that stage
ends, and the start of the next; where training is in them is part of the TrainState, so a
resumed run goes on in the stage it stopped in."""

from __future__ import annotations

import logging

import torch

from seq2seq.config import Config, StageConfig
from seq2seq.data.corpus import Part
from seq2seq.errors import UserError
from seq2seq.run.runlog import MetricsLog
from seq2seq.train import distributed
from seq2seq.train.state import TrainState

log = logging.getLogger(__name__)


def part_weights(cfg: Config, parts: list[Part], stage: int) -> list[float] | None:
    """How often each part of data.train is drawn in a stage: the stage's mix, else the parts'
    own weights (None when data.train is not parts: directions mix by temperature)."""
    if not parts or any(p.weight is None for p in parts):
        return None
    stages = cfg.train.stages
    if stages and stages[stage].mix:
        return [stages[stage].mix.get(p.name, 0.0) for p in parts]
    return [float(p.weight) for p in parts]


class Stages:
    """The run's stages and the rule that ends each (none: one stage that never ends here)."""

    def __init__(self, stages: list[StageConfig], state: TrainState, info: distributed.Dist):
        self.stages, self.info = stages, info
        if stages and state.stage >= len(stages):
            raise UserError(
                f"this run is in stage {state.stage + 1}, but train.stages lists "
                f"{len(stages)}: give the run its stages back, or start a new run"
            )

    def ended(self, st: TrainState, device: torch.device) -> bool:
        """Whether the current stage's rule says stop (all processes agree)."""
        if not self.stages:
            return False
        stage = self.stages[st.stage]
        if stage.max_steps is not None and st.step - st.stage_from >= stage.max_steps:
            return True
        if stage.patience is None:
            return False
        ended = st.bad_evals >= stage.patience  # counted on rank 0, which validates
        if self.info.enabled:
            (votes,) = distributed.all_sum([float(ended)], self.info, device)
            ended = votes > 0
        return ended

    def is_last(self, st: TrainState) -> bool:
        """Whether the current stage is the last (or there are none)."""
        return st.stage >= len(self.stages) - 1

    def advance(self, st: TrainState, metrics: MetricsLog) -> None:
        """Start the next stage: at the next epoch's first batch (the mix reorders batches),
        with early stopping's count restarted; the best checkpoint so far stays the best."""
        st.stage += 1
        st.stage_from = st.step
        st.bad_evals = 0
        if st.batch_in_epoch:
            st.epoch, st.batch_in_epoch = st.epoch + 1, 0
        name = self.stages[st.stage].name
        log.info("stage %d (%s) starts at step %d, epoch %d", st.stage + 1, name, st.step, st.epoch)
        metrics.write(st.step, {"event": "stage", "stage": name, "epoch": st.epoch})
