"""Shared fixtures. Tests run offline, with their own datasets cache, from a fresh clone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

# Before anything imports `datasets`: no network, and a cache that is not the user's.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="seq2seq-test-hf-"))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from seq2seq.config import ModelConfig, load_config  # noqa: E402
from seq2seq.data.demo_corpus import generate_pairs  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    return ModelConfig(
        d_model=32,
        heads=4,
        encoder_layers=2,
        decoder_layers=2,
        ffn_dim=64,
        dropout=0.0,
        max_positions=64,
    )


def write_parallel(folder: Path, name: str, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    """Write pairs as line-aligned `name.en` / `name.fr` files."""
    src, tgt = folder / f"{name}.en", folder / f"{name}.fr"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt


@pytest.fixture(scope="session")
def demo_pairs() -> list[tuple[str, str]]:
    return generate_pairs(2000, seed=7)


def torchrun_train(script: Path, config: Path, processes: int = 2) -> subprocess.CompletedProcess:
    """Run a training script (a patched `seq2seq train`) under torchrun on CPU processes."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        + [f"--nproc_per_node={processes}", str(script), "--config", str(config)],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a process left waiting for another would hang here
    )


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


@pytest.fixture(scope="session")
def tiny_config(demo_pairs):
    """`tiny_config(folder, pairs=…, model={…}, …)`: writes the tiny config (these keys changed)."""

    def write(folder: Path, pairs: list[tuple[str, str]] | None = None, **sections) -> Path:
        data = sections.pop("data", {})
        if "train" not in data:
            src, tgt = write_parallel(folder, "train", demo_pairs[:300] if pairs is None else pairs)
            data = {"train": {"src": str(src), "tgt": str(tgt)}, **data}
        config = {"run_dir": str(folder / "run"), "data": {"max_len": 40, **data}}
        for section in TINY.keys() | sections.keys():
            config[section] = {**TINY.get(section, {}), **sections.get(section, {})}
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    return write


def train_from(config: Path) -> Path:
    """Train in-process through `seq2seq train --config`; returns the run directory."""
    from typer.testing import CliRunner

    from seq2seq.cli.app import app

    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return load_config(config).run_dir


@pytest.fixture(scope="session")
def trained_tiny_run(tiny_config, tmp_path_factory) -> Path:
    """A run trained once on the tiny config: read it, or change a `copy_run` of it."""
    return train_from(tiny_config(tmp_path_factory.mktemp("tiny")))


def copy_run(run: Path, folder: Path) -> Path:
    """A copy of `run` in `folder`, for a test that changes it."""
    return Path(shutil.copytree(run, folder / run.name))


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
