"""Checkpoints: weights in safetensors, trainer state via `torch.load(weights_only=True)`.

Every file is written to a temporary name and moved into place with `os.replace`, and a step's
weights are written after its state, so a crash at any moment leaves only complete checkpoints.
Loading never unpickles arbitrary objects, so a checkpoint from elsewhere cannot run code.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from seq2seq.errors import UserError
from seq2seq.files import atomic_write, atomic_write_stream, atomic_write_text

CHECKPOINT_DIR = "checkpoints"
BEST = "best"
IMPORTED_FROM = "imported_from"  # safetensors metadata of imported weights: where they came from
QUANTIZED = "quantized"  # safetensors metadata of `export --format int8` weights: "int8"
_STEP = re.compile(r"^step_(\d+)\.safetensors$")


@dataclass(frozen=True)
class Checkpoint:
    """A saved step: its weights file and (for step checkpoints) its trainer-state file."""

    step: int
    weights: Path
    state: Path | None


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def save_checkpoint(
    run_dir: Path, step: int, model: nn.Module, state: dict[str, Any]
) -> Checkpoint:
    """Write the trainer state, then the weights, of `step`; return the new checkpoint."""
    folder = checkpoint_dir(run_dir)
    name = f"step_{step:08d}"
    weights, state_path = folder / f"{name}.safetensors", folder / f"{name}.state.pt"
    try:
        with _writing(folder):
            folder.mkdir(parents=True, exist_ok=True)
        with _writing(state_path):
            atomic_write_stream(state_path, lambda f: torch.save(state, f))
        with _writing(weights):
            atomic_write(weights, lambda tmp: save_model(model, tmp, metadata={"step": str(step)}))
    except UserError:
        if not weights.is_file():
            state_path.unlink(missing_ok=True)  # a state without its weights is no checkpoint
        raise
    return Checkpoint(step, weights, state_path)


def save_best(run_dir: Path, step: int, model: nn.Module, metrics: dict[str, float]) -> Path:
    """Write the weights as the best checkpoint so far, with its step and scores beside it."""
    folder = checkpoint_dir(run_dir)
    path, info = folder / f"{BEST}.safetensors", folder / f"{BEST}.json"
    with _writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    with _writing(path):
        atomic_write(path, lambda tmp: save_model(model, tmp, metadata={"step": str(step)}))
    with _writing(info):
        atomic_write_text(info, json.dumps({"step": step, **metrics}) + "\n")
    return path


@contextmanager
def _writing(path: Path, then: str = "continue with --resume") -> Iterator[None]:
    """A failed write (full disk, permissions) inside the block is the user's to fix."""
    try:
        yield
    except (OSError, SafetensorError) as e:  # safetensors wraps the OS's error in its own
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        full = getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        fix = "free some space" if full or "No space left" in reason else "fix that"
        raise UserError(
            f"cannot write {path}: {reason}; the files saved before are intact: {fix}, then {then}"
        ) from None


def list_checkpoints(run_dir: Path) -> list[Checkpoint]:
    """Complete step checkpoints (weights and state both present), oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        m = _STEP.match(path.name)
        state = path.with_name(path.name.replace(".safetensors", ".state.pt"))
        if m and state.is_file():
            found.append(Checkpoint(int(m.group(1)), path, state))
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def best_or_latest(run_dir: Path) -> Path | None:
    """The weights a finished run should translate with: best by validation BLEU, else latest."""
    best = checkpoint_dir(run_dir) / f"{BEST}.safetensors"
    if best.is_file():
        return best
    latest = latest_checkpoint(run_dir)
    return latest.weights if latest else None


def prune(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints (the best one is separate), and
    what a killed writer left behind (see `remove_debris`)."""
    for ckpt in list_checkpoints(run_dir)[:-keep_last]:
        ckpt.weights.unlink(missing_ok=True)
        if ckpt.state is not None:
            ckpt.state.unlink(missing_ok=True)
    remove_debris(run_dir)


# Temporaries of a run's own writers: `.NAME.tmp` (files.atomic_write), `.tmpXXXXXX` (safetensors
# writes through a temporary file beside its target) and `.spm-train-*` (tokenizer training).
_DEBRIS = {".": (".*.tmp",), CHECKPOINT_DIR: (".*.tmp", ".tmp*"), "tokenizer": (".spm-train-*",)}


def remove_debris(run_dir: Path) -> list[Path]:
    """Remove what a killed writer of this run left: its temporary files (for a big model each is
    gigabytes) and a step's trainer state without its weights. Call it when no writer of this
    run is alive (at start-up, and after each save: one process writes)."""
    removed = []
    for folder, patterns in _DEBRIS.items():
        for pattern in patterns:
            for path in (Path(run_dir) / folder).glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed.append(path)
    folder = checkpoint_dir(run_dir)
    for state in folder.glob("step_*.state.pt"):
        if not state.with_name(state.name.replace(".state.pt", ".safetensors")).is_file():
            state.unlink(missing_ok=True)
            removed.append(state)
    return removed


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights into `model`, explaining any shape or name mismatch."""
    path = Path(path)
    shapes = _readable(path, _shapes)
    if is_int8(path):
        raise UserError(INT8_ONLY.format(path=path))
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [
        f"{k}: checkpoint has {list(shapes[k])}, model expects {list(expected[k])}"
        for k in shapes
        if k in expected and shapes[k] != expected[k]
    ]
    problems += [f"{k}: not a parameter of this model" for k in shapes if k not in expected]
    if problems:
        more = f"\n  … and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise UserError(
            f"{path} does not fit this model (trained with another vocabulary or shape?):\n  "
            + "\n  ".join(problems[:5])
            + more
        )
    try:
        load_model(model, str(path), strict=True, device=str(next(model.parameters()).device))
    except RuntimeError as e:
        raise UserError(f"{path} does not fit this model: {e}") from None


INT8_ONLY = (
    "{path} holds int8 weights (seq2seq export --format int8): they decode on CPU with "
    "--quantize int8 only; train or export from the float32 run they came from"
)


def is_int8(weights: Path) -> bool:
    """Whether a weights file holds int8 weights (`export --format int8`), not float ones."""
    return _metadata(weights).get(QUANTIZED) == "int8"


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, as views of the mapped file (no copy is made here)."""
    return _readable(Path(path), load_file)


def _readable(path: Path, read: Callable[[str], Any]) -> Any:
    """`read` of a weights file; UserError when it is missing or not readable."""
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        return read(str(path))
    except Exception as e:  # safetensors raises several types for truncated/corrupt files
        raise UserError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {e}"
        ) from None


def _shapes(path: str) -> dict[str, tuple[int, ...]]:
    with safe_open(path, framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def _metadata(weights: Path) -> dict[str, str]:
    """A weights file's metadata; none when it is unreadable (its loader says why)."""
    try:
        with safe_open(str(weights), framework="pt") as f:
            return f.metadata() or {}
    except Exception:
        return {}


def save_int8(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write int8 weights (marked as such, so float loaders refuse them) atomically."""
    meta = {**metadata, QUANTIZED: "int8"}
    with _writing(path, then="try again"):
        atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def imported_from(weights: Path) -> str | None:
    """Where a checkpoint's weights were imported from (its `imported_from` metadata), if they
    were imported rather than trained."""
    return _metadata(weights).get(IMPORTED_FROM)


def load_state(path: Path) -> dict[str, Any]:
    """Trainer state saved by `save_checkpoint`; refuses anything but tensors and plain data."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle errors, refused globals, truncation
        raise UserError(f"cannot load trainer state {path}: {e}") from None


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of several checkpoints of one model (accumulated in float64).

    Only floating-point tensors are averaged: an integer or boolean tensor (a counter, a
    mask) has no meaningful mean and would be truncated, so it is taken from the last
    checkpoint, as fairseq's average_checkpoints does."""
    total: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    for path in paths:
        tensors = load_tensors(path)
        if total and (
            tensors.keys() != last.keys() or any(tensors[k].shape != last[k].shape for k in last)
        ):
            raise UserError(f"{path} is not a checkpoint of the same model as {paths[0]}")
        for k, v in tensors.items():
            if v.is_floating_point():
                total[k] = total[k] + v.double() if k in total else v.double()
        last = tensors
    return {
        k: (total[k] / len(paths)).to(v.dtype) if v.is_floating_point() else v
        for k, v in last.items()
    }


def average_last(run_dir: Path, n: int, out: Path | None = None) -> tuple[Path, list[int]]:
    """Average the newest `n` step checkpoints into one weights file; return it and the steps."""
    found = list_checkpoints(run_dir)
    if len(found) < n:
        raise UserError(
            f"{run_dir} has {len(found)} step checkpoint(s); cannot average the last {n} "
            "(train.keep_last limits how many are kept)"
        )
    chosen = found[-n:]
    averaged = average_weights([c.weights for c in chosen])
    out = Path(out) if out else checkpoint_dir(run_dir) / f"average_last{n}.safetensors"
    steps = [c.step for c in chosen]
    meta = {"averaged_steps": ",".join(map(str, steps))}
    with _writing(out, then="try again"):
        atomic_write(out, lambda tmp: save_file(averaged, tmp, metadata=meta))
    return out, steps
