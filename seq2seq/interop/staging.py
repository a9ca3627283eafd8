"""Folders that importers and exporters write: built aside, then swapped into place whole.

A folder built beside its target and moved in with one `os.replace` is either all there or not
there: a failed import or export leaves nothing behind, not a half-written run.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file, save_model

from seq2seq.config import CONFIG_NAME, Config, save_config
from seq2seq.data.tokenizer import TOKENIZER_DIR
from seq2seq.errors import UserError
from seq2seq.run.checkpoint import IMPORTED_FROM, checkpoint_dir


def require_new_folder(path: Path) -> Path:
    """`path`, refused unless it is absent or an empty folder."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"{path} exists and is not an empty folder; choose a new one")
    return path


@contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """An empty folder beside `target`, moved into its place when the block ends without error
    (`target` absent or empty, as `require_new_folder` checks)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
        staging = Path(tmp) / "staged"
        staging.mkdir()
        yield staging
        if target.is_dir():
            target.rmdir()  # empty, checked before anything was built
        os.replace(staging, target)


def write_imported_run(
    run_dir: Path,
    source: str,
    cfg: Config,
    model: torch.nn.Module,
    write_tokenizer: Callable[[Path], None],
) -> None:
    """Write an imported model as a run: `write_tokenizer(folder)` fills its tokenizer folder,
    then the config and the weights as the step-0 checkpoint, all moved into `run_dir` at once."""
    with staged_folder(run_dir) as staging:
        tok_dir = staging / TOKENIZER_DIR
        tok_dir.mkdir()
        write_tokenizer(tok_dir)
        save_config(cfg, staging / CONFIG_NAME)
        ckpt = checkpoint_dir(staging)
        ckpt.mkdir()
        meta = {"step": "0", IMPORTED_FROM: str(source)}
        save_model(model, str(ckpt / "step_00000000.safetensors"), metadata=meta)
        torch.save({IMPORTED_FROM: str(source)}, ckpt / "step_00000000.state.pt")


def write_hf_model(
    folder: Path, tensors: dict[str, torch.Tensor], config: dict, generation: dict
) -> None:
    """A saved Hugging Face model's weights, config.json and generation_config.json."""
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2), "utf-8")
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2), "utf-8")
