"""When training must stop before its last step: SIGINT/SIGTERM, and the wall-clock budget.

The trainer asks after every update, so the update running when a signal arrives (or the budget
runs out) is the last one, and the checkpoint saved on the way out holds it. Under torchrun the
processes must agree, or one would stop and leave the others waiting at the next collective.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from seq2seq.train import distributed

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """A signal received, or a deadline passed, since training started."""

    def __init__(self, max_minutes: float | None):
        self.signal: int | None = None
        self._deadline = time.monotonic() + max_minutes * 60 if max_minutes else math.inf

    @contextmanager
    def catching_signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM set a flag instead of interrupting (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self.signal is None:
                name = signal.Signals(signum).name
                log.warning("%s received: stopping after this update", name)
            self.signal = signum

        previous = {s: signal.signal(s, handler) for s in SIGNALS}
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    @property
    def deadline(self) -> float:
        """The time.monotonic() at which the time budget ends (inf: none)."""
        return self._deadline

    def local(self) -> bool:
        """Whether this process has a reason to stop."""
        return self.signal is not None or time.monotonic() > self._deadline

    def agreed(self, info: distributed.Dist, device: torch.device) -> bool:
        """Whether any process has a reason to stop (one small collective under torchrun)."""
        if not info.enabled:
            return self.local()
        (votes,) = distributed.all_sum([float(self.local())], info, device)
        return votes > 0

    @property
    def signal_name(self) -> str | None:
        return None if self.signal is None else signal.Signals(self.signal).name
