"""`train --init-from RUN`: a new run starts from another run's weights and tokenizer."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import load_run_config
from seq2seq.run.checkpoint import best_or_latest, latest_checkpoint
from tests.runs import train_from, write_parallel

# Every test trains a run from another trained run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, tiny_config):
    """A tiny run with dropout 0.1 and beam 2, for a new run to start from."""
    config = tiny_config(
        tmp_path_factory.mktemp("base"), model={"dropout": 0.1}, decode={"beam_size": 2}
    )
    return train_from(config)


def _config(folder, pairs, extra: str = "") -> str:
    src, tgt = write_parallel(folder, "ft", pairs)
    path = folder / "ft.yaml"
    path.write_text(
        f"run_dir: {folder / 'ft'}\ndata:\n  train: {{src: {src}, tgt: {tgt}}}\n  max_len: 40\n"
        "train: {max_tokens: 400, max_steps: 1, lr: 1.0e-12, warmup_steps: 0, save_every: 1, "
        "eval_every: 100, threads: 1, tensorboard: false}\n" + extra
    )
    return str(path)


def test_a_new_run_starts_from_the_weights_and_tokenizer_of_another(base_run, tmp_path, demo_pairs):
    config = _config(tmp_path, demo_pairs[300:500], "model: {dropout: 0.0}\n")
    result = CliRunner().invoke(app, ["--quiet", "train", "-c", config, "--init-from", base_run])
    assert result.exit_code == 0, result.output
    run = tmp_path / "ft"
    assert (run / "tokenizer" / "spm.model").read_bytes() == (
        base_run / "tokenizer" / "spm.model"
    ).read_bytes()
    start, after = load_file(best_or_latest(base_run)), load_file(latest_checkpoint(run).weights)
    assert start.keys() == after.keys()
    for name in start:  # one step at lr 1e-12: the base run's weights, to float precision
        assert torch.allclose(start[name], after[name], atol=1e-6), name
    cfg = load_run_config(run)
    assert cfg.model.dropout == 0.0 and cfg.model.d_model == 32  # set here; from the base run
    assert cfg.decode.beam_size == 2  # left out here: the base run's


def test_a_model_section_that_contradicts_the_checkpoint_is_one_clear_error(
    base_run, tmp_path, demo_pairs
):
    config = _config(tmp_path, demo_pairs[300:400], "model: {d_model: 64, heads: 4}\n")
    result = CliRunner().invoke(app, ["train", "-c", config, "--init-from", base_run])
    assert result.exit_code == 2
    assert "model.d_model: 64 here, 32 in the checkpoint's run" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "ft").exists()
    missing = CliRunner().invoke(app, ["train", "-c", config, "--init-from", tmp_path / "none"])
    assert missing.exit_code == 1 and "run directory not found" in missing.output
