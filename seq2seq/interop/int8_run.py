"""`seq2seq export --format int8`: a run directory whose weights are int8, for CPU decoding.

The folder is an ordinary run directory (config, tokenizer, `checkpoints/best.safetensors`,
the shortlist if the run has one) whose weights file holds int8 rows, their per-row scales and
the float32 biases and norms (`model.int8.int8_state`), marked `quantized: int8` in its
metadata. `load_run` builds it straight into the int8 model, and its config says
`decode.quantize: int8`, so translate, evaluate and serve --run DIR decode int8 unasked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors import safe_open

from seq2seq.config import CONFIG_NAME, save_config
from seq2seq.decode.shortlist import shortlist_path
from seq2seq.interop.staging import require_new_folder, staged_folder
from seq2seq.model.int8 import int8_state
from seq2seq.run.checkpoint import BEST, checkpoint_dir, save_int8
from seq2seq.run.rundir import InitFrom, copy_tokenizer, load_run


def export_int8(run_dir: Path, out: Path, checkpoint: Path | None = None) -> Path:
    """Write the run's model (best, else latest, or `checkpoint`) as an int8 run in `out`."""
    out = require_new_folder(out)
    run = load_run(run_dir, checkpoint, "cpu", int8=True)
    decode = run.config.decode.model_copy(update={"quantize": "int8"})
    cfg = run.config.model_copy(update={"decode": decode})
    with staged_folder(out) as staging:
        into = cfg.model_copy(update={"run_dir": str(staging)})
        copy_tokenizer(InitFrom(Path(run_dir), run.checkpoint), into)
        save_config(cfg.model_copy(update={"run_dir": str(out)}), staging / CONFIG_NAME)
        if shortlist_path(run_dir).is_file():
            shutil.copyfile(shortlist_path(run_dir), shortlist_path(staging))
        folder = checkpoint_dir(staging)
        folder.mkdir()
        meta = {**_metadata(run.checkpoint), "int8_from": str(run.checkpoint)}
        save_int8(folder / f"{BEST}.safetensors", int8_state(run.model), meta)
    return out


def _metadata(weights: Path) -> dict[str, str]:
    """The float32 checkpoint's step (and import source), carried over to the int8 weights."""
    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata() or {}
    return {k: v for k, v in meta.items() if k in ("step", "imported_from")}
