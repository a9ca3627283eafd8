"""The rules of a run directory: never overwrite a run, resume only what fits, save the config;
and opening a trained run (config, tokenizer, model) for every command that uses one."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import (
    CONFIG_NAME,
    Config,
    LoadOptions,
    load_config,
    load_run_config,
    resolved,
    save_config,
    validate_config,
)
from seq2seq.data.layouts import load_run_tokenizer, tokenizer_files
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import ConfigError, UserError
from seq2seq.model.int8 import build_int8, frame_only, quantized_state, use_activation_scales
from seq2seq.model.packed import pack_linears
from seq2seq.model.quantize import int8_device, release_freed_memory, use_int8_engine
from seq2seq.model.transformer import Transformer, build_model
from seq2seq.run.checkpoint import (
    Checkpoint,
    best_or_latest,
    imported_from,
    is_int8,
    latest_checkpoint,
    load_tensors,
    load_weights,
    remove_debris,
)
from seq2seq.runtime import resolve_device

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
    "data.pairs",
    "data.temperature",
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
    if latest is not None and imported_from(latest.weights) is not None:
        raise UserError(
            f"{run_dir} holds an imported model, not a training run: fine-tune it into a new "
            f"run directory with --init-from {run_dir}"
        )
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
    corpora = [(p.src_lang, p.tgt_lang, p.train) for p in now.data.pairs] or [now.data.train]
    saved_corpora = [(p.src_lang, p.tgt_lang, p.train) for p in saved.data.pairs] or [
        saved.data.train
    ]
    return saved.tokenizer == now.tokenizer and saved_corpora == corpora


# What a fine-tuning config may set differently from the run it starts from: regularisation,
# not the shape of the weights or the vocabulary.
MAY_DIFFER = {"model": {"dropout", "attention_dropout"}, "tokenizer": set()}


@dataclass(frozen=True)
class InitFrom:
    """The run a new one starts from: its directory (for the tokenizer) and its weights."""

    run_dir: Path
    weights: Path


def config_for_init(cfg: Config, init_run: Path) -> tuple[Config, InitFrom]:
    """The config to train with when starting from another run's weights (`--init-from`).

    The model and tokenizer are the other run's: keys of those sections the config leaves out
    come from it, and a key it sets to another value is an error (dropout may differ). Decode
    settings the config leaves out come from it too.
    """
    init_run = Path(init_run)
    init_cfg = load_run_config(init_run)
    weights = best_or_latest(init_run)
    if weights is None:
        raise UserError(f"--init-from {init_run}: the run has no checkpoint yet")
    if Path(cfg.run_dir).resolve() == init_run.resolve():
        raise UserError(f"--init-from {init_run}: train into another run directory")
    data = init_cfg.model_dump(mode="json")
    mine = cfg.model_dump(mode="json")
    contradictions = []
    for section, may_differ in MAY_DIFFER.items():
        for key in sorted(getattr(cfg, section).model_fields_set):
            if key in may_differ:
                data[section][key] = mine[section][key]
            elif mine[section][key] != data[section][key]:
                contradictions.append(
                    f"{section}.{key}: {mine[section][key]!r} here, {data[section][key]!r} in the "
                    "checkpoint's run"
                )
    if contradictions:
        raise ConfigError(
            f"--init-from {init_run}: the config contradicts the checkpoint (leave these keys "
            "out; they come from that run):\n  " + "\n  ".join(contradictions)
        )
    for key in cfg.decode.model_fields_set:
        data["decode"][key] = mine["decode"][key]
    for key in ("run_dir", "data", "train"):
        data[key] = mine[key]
    merged = validate_config(data, source=f"the config with --init-from {init_run}")
    return merged, InitFrom(init_run, weights)


def copy_tokenizer(init: InitFrom, cfg: Config) -> None:
    """Put the tokenizer of the run `init` names into the new run's directory: the files it
    loads from and any beside them (an import's Hugging Face tokenizer files, which export
    writes back)."""
    needed = tokenizer_files(init.run_dir, cfg.tokenizer)
    for path in needed:
        if not path.is_file():
            raise UserError(f"--init-from {init.run_dir}: tokenizer file missing: {path}")
    for path in sorted({*needed[0].parent.iterdir(), *needed}):
        if path.is_file():
            target = Path(cfg.run_dir) / path.relative_to(init.run_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


@dataclass
class LoadedRun:
    """A trained run opened for use: its config, tokenizer, and model (weights loaded, eval)."""

    config: Config
    tokenizer: Tokenizer
    model: Transformer
    checkpoint: Path  # the weights loaded


def load_run(
    run_dir: Path,
    checkpoint: Path | None = None,
    device: torch.device | str = "cpu",
    *,
    int8: bool = False,
) -> LoadedRun:
    """Open a run directory with its best (else latest) or a given checkpoint, on `device`; with
    `int8`, as an int8 model on CPU (int8 weights built as they are, float32 ones quantized)."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    tokenizer = load_run_tokenizer(run_dir, cfg.tokenizer)
    if cfg.tokenizer.languages:  # a many-language model's default direction is the run's
        tokenizer.src_lang, tokenizer.tgt_lang = cfg.data.src_lang, cfg.data.tgt_lang
    path = Path(checkpoint) if checkpoint else best_or_latest(run_dir)
    if path is None:
        raise UserError(f"{run_dir} has no checkpoint yet; train (or wait for the first save)")
    if int8:
        model = int8_model(cfg, tokenizer, path)
    else:
        model = build_model(cfg.model, tokenizer).to(device)
        load_weights(model, path)
    model.eval()
    return LoadedRun(cfg, tokenizer, model, path)


def load_for_decoding(
    run_dir: Path,
    checkpoint: Path | None,
    device: str,
    load: LoadOptions,
    *,
    rows: int = 1,
    unpacked: frozenset[str] = frozenset(),
) -> tuple[LoadedRun, torch.device]:
    """A run opened as `load` says, and its device: int8 on CPU (inputs scaled per row or per
    batch), else float32, on CPU on oneDNN-packed weights laid out for `rows` rows at a time
    (the layers `unpacked` names keep torch's GEMM)."""
    int8 = load.quantize == "int8"
    dev = resolve_device(int8_device(device) if int8 else device)
    # int8 once, at load: decoding then runs the int8 model like any other
    run = load_run(run_dir, checkpoint, dev, int8=int8)
    if int8:
        use_activation_scales(run.model, per_row=load.int8_scales == "row")
    elif dev.type == "cpu" and load.packed_weights:
        pack_linears(run.model, rows, set(unpacked))
    return run, dev


def int8_model(cfg: Config, tokenizer: Tokenizer, weights: Path) -> Transformer:
    """The int8 model of a weights file, int8 or float32, without a float32 model: its frame is
    built on the meta device and the weights, read as views of the mapped file, go into the int8
    modules (float32 ones quantized one tensor at a time)."""
    use_int8_engine()
    int8 = is_int8(weights)
    with frame_only():
        frame = build_model(cfg.model, tokenizer)
    tensors = load_tensors(weights)
    try:
        model = build_int8(frame, tensors if int8 else quantized_state(frame, tensors))
    except (KeyError, ValueError) as e:
        raise UserError(
            f"{weights} does not fit this model (trained with another vocabulary or shape?): {e}"
        ) from None
    del tensors  # the file's map goes; the quantizing's scratch memory goes back to the system
    release_freed_memory()
    log.info("int8: %s weights built into the int8 model", "int8" if int8 else "float32")
    return model
