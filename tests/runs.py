"""Corpus files, tiny training configs, training runs and CLI calls the tests share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import load_config

REPO = Path(__file__).resolve().parents[1]

# The tiny training config: a few seconds to train, and enough of a model for the run commands
# (two decoder layers of four heads; short outputs keep decoding quick).
TINY = {
    "tokenizer": {"vocab_size": 120},
    "model": {
        "d_model": 32,
        "heads": 4,
        "encoder_layers": 1,
        "decoder_layers": 2,
        "ffn_dim": 64,
        "dropout": 0.0,
        "max_positions": 64,
    },
    "train": {
        "max_tokens": 400,
        "max_steps": 2,
        "eval_every": 100,
        "save_every": 1,
        "threads": 1,
        "tensorboard": False,
    },
    "decode": {"max_len_a": 0.0, "max_len_b": 8},
}


def write_parallel(folder: Path, name: str, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    """Write pairs as line-aligned `name.en` / `name.fr` files."""
    src, tgt = folder / f"{name}.en", folder / f"{name}.fr"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt


def write_tiny_config(folder: Path, pairs: list[tuple[str, str]], **sections) -> Path:
    """Write the tiny config training on `pairs` into `folder` (these keys changed)."""
    data = sections.pop("data", {})
    if "train" not in data:
        src, tgt = write_parallel(folder, "train", pairs)
        data = {"train": {"src": str(src), "tgt": str(tgt)}, **data}
    config = {"run_dir": str(folder / "run"), "data": {"max_len": 40, **data}}
    for section in TINY.keys() | sections.keys():
        config[section] = {**TINY.get(section, {}), **sections.get(section, {})}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_pairs_config(folder: Path, demo_pairs, how: str, **data) -> Path:
    """A tiny config of two directions, en→fr and fr→en, from the same two files (the reverse
    direction a third the size), the target language given `how` (`tokenizer.target_language`)."""
    en, fr = write_parallel(folder, "train", demo_pairs[:300])
    en_small, fr_small = write_parallel(folder, "small", demo_pairs[300:400])
    pairs = [
        {"src_lang": "en", "tgt_lang": "fr", "train": {"src": str(en), "tgt": str(fr)},
         "valid": {"src": str(en), "tgt": str(fr), "max_pairs": 6}},
        {"src_lang": "fr", "tgt_lang": "en", "train": {"src": str(fr_small), "tgt": str(en_small)},
         "valid": {"src": str(fr), "tgt": str(en), "max_pairs": 6}},
    ]  # fmt: skip
    config = {
        "run_dir": str(folder / "run"),
        "data": {"max_len": 40, "pairs": pairs, **data},
        **TINY,
        "tokenizer": {**TINY["tokenizer"], "target_language": how},
        "train": {**TINY["train"], "max_steps": 4, "eval_every": 4, "valid_bleu_sentences": 6},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_small_config(folder: Path, corpus, run: str = "run", **train_keys) -> Path:
    """`folder/<run>.yaml`: six updates of a one-layer, two-head model with dropout on the
    `corpus` (source, target) files, logging every update (the fault-injection tests' run)."""
    src, tgt = corpus
    data = {
        "run_dir": str(folder / run),
        "data": {"train": {"src": str(src), "tgt": str(tgt)}, "max_len": 48},
        "tokenizer": {"vocab_size": 300},
        "model": {
            "d_model": 32,
            "heads": 2,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "ffn_dim": 64,
            "dropout": 0.1,
            "max_positions": 64,
        },
        "train": {
            "max_tokens": 512,
            "max_steps": 6,
            "warmup_steps": 4,
            "log_every": 1,
            "eval_every": 1000,
            "save_every": 1000,
            "threads": 1,
            **train_keys,
        },
    }
    path = folder / f"{run}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli(*args, code: int = 0):
    """Invoke `seq2seq` in-process with `args` (paths welcome); assert its exit code."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def train_from(config: Path) -> Path:
    """Train in-process through `seq2seq train --config`; returns the run directory."""
    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return load_config(config).run_dir


def train_tiny_run(folder: Path, pairs: list[tuple[str, str]], settings: str) -> Path:
    """Train a run in-process through `seq2seq train` on `pairs`; `settings` is the YAML after
    run_dir and data (tokenizer, model, train, …). Returns the run directory."""
    src, tgt = write_parallel(folder, "train", pairs)
    config = folder / "config.yaml"
    config.write_text(
        f"run_dir: {folder / 'run'}\n"
        f"data:\n  train: {{src: {src}, tgt: {tgt}}}\n  max_len: 40\n" + settings
    )
    return train_from(config)


def copy_run(run: Path, folder: Path) -> Path:
    """A copy of `run` in `folder`, for a test that changes it."""
    return Path(shutil.copytree(run, folder / run.name))


def torchrun_train(script: Path, config: Path, processes: int = 2) -> subprocess.CompletedProcess:
    """Run a training script (a patched `seq2seq train`) under torchrun on CPU processes."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        + [f"--nproc_per_node={processes}", str(script), "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a process left waiting for another would hang here
    )
