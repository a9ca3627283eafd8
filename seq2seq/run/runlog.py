"""The run's metrics log: JSON lines in `metrics.jsonl` (and TensorBoard scalars), rank 0 only."""

from __future__ import annotations

import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import torch

from seq2seq.files import atomic_write_text

METRICS_NAME = "metrics.jsonl"


class MetricsLog:
    """Appends one JSON object a record; records with a `split` also go to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool, enabled: bool = True):
        self.path = Path(run_dir) / METRICS_NAME
        self.enabled = enabled
        self.tb = _tensorboard(Path(run_dir)) if tensorboard and enabled else None

    def write(self, step: int, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **record, "time": time.time()}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None and "split" in record:
            for key, value in record.items():
                if key not in ("step", "split", "time") and isinstance(value, (int, float)):
                    self.tb.add_scalar(f"{record['split']}/{key}", value, step)
            self.tb.flush()

    def truncate(self, saved_at: tuple[int, int, int] | None) -> None:
        """Drop records logged after the checkpoint a run resumes from (step, epoch, batch), or
        all of them when it starts afresh (a run killed before its first checkpoint): they will
        be logged again."""
        if not self.enabled or not self.path.is_file():
            return
        if saved_at is None:
            atomic_write_text(self.path, "")
            return
        keep = []
        for record in read_records(self.path.parent):
            # A skipped update's record holds the step before it and its own data position.
            at = (record.get("step", 0), record.get("epoch", -1), record.get("batch_in_epoch", -1))
            if at[0] <= saved_at[0] and ("batch_in_epoch" not in record or at <= saved_at):
                keep.append(record)
        atomic_write_text(self.path, "".join(json.dumps(record) + "\n" for record in keep))


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run's metrics log, oldest first (none when it has no log)."""
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    return records


def json_number(x: float) -> float | str:
    """`x`, or its name ("nan", "inf") where strict JSON has no literal for it."""
    return x if math.isfinite(x) else str(x)


def memory(device: torch.device) -> dict[str, float]:
    """Peak memory so far: process RSS, and CUDA allocations on a GPU."""
    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device.type == "cuda":
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def _tensorboard(run_dir: Path):
    try:  # optional, and slow to import: only runs that log to it load it
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))
