"""Shared fixtures. Tests run offline, with their own datasets cache, from a fresh clone."""

from __future__ import annotations

import os
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

from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.demo_corpus import generate_pairs  # noqa: E402


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


def train_tiny_run(folder: Path, pairs: list[tuple[str, str]], settings: str) -> Path:
    """Train a run in-process through `seq2seq train` on `pairs`; `settings` is the YAML after
    run_dir and data (tokenizer, model, train, …). Returns the run directory."""
    from typer.testing import CliRunner

    from seq2seq.cli import app

    src, tgt = write_parallel(folder, "train", pairs)
    config = folder / "config.yaml"
    config.write_text(
        f"run_dir: {folder / 'run'}\n"
        f"data:\n  train: {{src: {src}, tgt: {tgt}}}\n  max_len: 40\n" + settings
    )
    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return folder / "run"
