"""The rules of a run directory: never overwrite a run, resume only what fits, save the config."""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoint import Checkpoint, latest_checkpoint
from .config import CONFIG_NAME, Config, load_config, resolved, save_config
from .errors import ConfigError, UserError

log = logging.getLogger(__name__)


def prepare_run_dir(
    cfg: Config, resume: bool, write: bool = True
) -> tuple[Checkpoint | None, bool]:
    """Check the run directory fits the request and (if `write`) save the resolved config.

    Returns the checkpoint to resume from (or None) and whether the tokenizer already in the
    directory may be reused (it was trained with these settings on this data).
    """
    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"run_dir {run_dir} exists and is not a directory")
    latest = latest_checkpoint(run_dir)
    if latest is not None and not resume:
        raise UserError(
            f"{run_dir} already holds checkpoints (latest: step {latest.step}); pass --resume "
            "to continue that run, or choose another run_dir"
        )
    saved_path = run_dir / CONFIG_NAME
    if latest is not None and saved_path.is_file():
        changed = changed_keys(load_config(saved_path), cfg, ("model", "tokenizer"))
        if changed:
            raise ConfigError(
                f"--resume: the config differs from the run's in {', '.join(changed)}; "
                "the checkpoints cannot continue with another model or vocabulary"
            )
    if resume and latest is None and write:
        log.info("no checkpoint in %s yet: starting from scratch", run_dir)
    reuse_tokenizer = latest is not None or same_tokenizer(cfg)
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(resolved(cfg), saved_path)
    return latest, reuse_tokenizer


def changed_keys(old: Config, new: Config, sections: tuple[str, ...]) -> list[str]:
    """`section.key` for every key whose value differs between two configs."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [
        f"{section}.{key}"
        for section in sections
        for key in sorted(set(a[section]) | set(b[section]))
        if a[section].get(key) != b[section].get(key)
    ]


def same_tokenizer(cfg: Config) -> bool:
    """Whether the run directory's tokenizer was trained with these settings on this data."""
    saved_path = Path(cfg.run_dir) / CONFIG_NAME
    if not saved_path.is_file():
        return False
    try:
        saved = load_config(saved_path)
    except UserError:
        return False
    now = resolved(cfg)
    return saved.tokenizer == now.tokenizer and saved.data.train == now.data.train
