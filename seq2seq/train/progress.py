"""The training progress bar: steps done out of the steps the run will actually do.

With a time budget (`train.max_minutes`) the run usually ends at its deadline long before
`max_steps` (a 30-minute run with max_steps 20,000 showed 0/20000 and a three-hour ETA), so the
bar's total is the step the run is projected to reach at the deadline, from the rate so far,
and its ETA is the budget left.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

from tqdm import tqdm

MIN_STEPS_FOR_RATE = 5  # steps measured before the rate is trusted to project the total


class TrainingBar:
    """tqdm over training steps, its total following the time budget when that ends the run."""

    def __init__(
        self,
        *,
        max_steps: int,
        start_step: int,
        deadline: float = math.inf,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_steps, self.deadline, self.clock = max_steps, deadline, clock
        self.start_step, self.started = start_step, clock()
        self.step = start_step
        self.bar = tqdm(
            total=max_steps,
            initial=start_step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            mininterval=1.0 if sys.stderr.isatty() else 30.0,
            file=sys.stderr,
            disable=not enabled,
        )

    def advance(self, step: int) -> None:
        """One more step done (`step` is the step reached)."""
        self.step = step
        if math.isfinite(self.deadline):
            self.bar.total = self.projected_total(step)
        self.bar.update(1)

    def projected_total(self, step: int) -> int:
        """max_steps, or the step the rate so far reaches at the deadline if that is sooner."""
        done, now = step - self.start_step, self.clock()
        if done < MIN_STEPS_FOR_RATE or now <= self.started:
            return self.max_steps
        rate = done / (now - self.started)
        at_deadline = step + int(rate * max(self.deadline - now, 0.0))
        return max(step, min(self.max_steps, at_deadline))

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_postfix_str(text)

    def close(self) -> None:
        self.bar.close()
