"""The rules of a run directory: never overwrite a run, resume only what fits, save the config."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint import Checkpoint, latest_checkpoint, remove_debris
from .config import CONFIG_NAME, Config, load_config, resolved, save_config
from .errors import ConfigError, UserError

log = logging.getLogger(__name__)


# What decides the order of the training batches. The saved data position counts batches of
# that order, so a resumed run may change these only by restarting its epoch (--reset-dataloader).
DATA_ORDER_KEYS = (
    "data.train",
    "data.src_lang",
    "data.tgt_lang",
    "data.max_len",
    "data.max_len_ratio",
    "data.dedup",
    "train.max_tokens",
    "train.update_freq",
    "train.seed",
)
APPLIED_SECTIONS = ("data", "train", "decode")


@dataclass(frozen=True)
class Change:
    """A setting a resumed run changes: it applies from the resumed step on."""

    key: str
    old: Any
    new: Any

    def record(self) -> dict[str, Any]:
        """The event written to metrics.jsonl."""
        return {"event": "config_change", "key": self.key, "old": self.old, "new": self.new}


def prepare_run_dir(
    cfg: Config, resume: bool, write: bool = True, reset_dataloader: bool = False
) -> tuple[Checkpoint | None, bool, list[Change]]:
    """Check the run directory fits the request and (if `write`) save the resolved config.

    Returns the checkpoint to resume from (or None), whether the tokenizer already in the
    directory may be reused (it was trained with these settings on this data), and the settings
    a resumed run changes. The model and tokenizer of a run never change (its checkpoints hold
    them); the batch order only with `reset_dataloader`; every other setting may (fairseq's
    `--reset-*` flags are the model). `config.yaml` is rewritten to say what runs.
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
    changes: list[Change] = []
    if latest is not None and saved_path.is_file():
        saved = load_config(saved_path)
        changed = changed_keys(saved, cfg, ("model", "tokenizer"))
        if changed:
            raise ConfigError(
                f"--resume: the config differs from the run's in {', '.join(changed)}; "
                "the checkpoints cannot continue with another model or vocabulary"
            )
        changes = resume_changes(saved, resolved(cfg))
        order = [c for c in changes if c.key in DATA_ORDER_KEYS]
        if order and not reset_dataloader:
            what = ", ".join(f"{c.key} ({_short(c.old)} → {_short(c.new)})" for c in order)
            raise ConfigError(
                f"--resume: {what} changed, which reorders the training batches the saved data "
                "position counts; pass --reset-dataloader to restart the current epoch with "
                "the new setting, or keep the run's value"
            )
    if resume and latest is None and write:
        log.info("no checkpoint in %s yet: starting from scratch", run_dir)
    reuse_tokenizer = latest is not None or same_tokenizer(cfg)
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        remove_debris(run_dir)
        save_config(resolved(cfg), saved_path)
    return latest, reuse_tokenizer, changes


def resume_changes(old: Config, new: Config) -> list[Change]:
    """Every `section.key` of data, train and decode whose value differs (corpora as a whole)."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [
        Change(f"{section}.{key}", a[section].get(key), b[section].get(key))
        for section in APPLIED_SECTIONS
        for key in sorted(set(a[section]) | set(b[section]))
        if a[section].get(key) != b[section].get(key)
    ]


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "…"


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
