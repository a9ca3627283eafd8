"""`seq2seq info`: what a run directory holds, at a glance or as JSON."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import DecodeConfig
from seq2seq.model.transformer import count_parameters
from seq2seq.report.info import best_validation, final_choice
from seq2seq.run.checkpoint import list_checkpoints
from seq2seq.run.rundir import load_run
from seq2seq.serve.app import ServeConfig, run_info
from tests.factories import untrained_run
from tests.runs import copy_run


@pytest.fixture
def run_dir(trained_tiny_run) -> Path:
    """A real two-step run: config, tokenizer, checkpoints, metrics."""
    return trained_tiny_run


def _info(*args: str):
    return CliRunner().invoke(app, ["info", *args])


@pytest.mark.slow
def test_json_summary_matches_the_run(run_dir):
    result = _info("--run", str(run_dir), "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    saved = load_run(run_dir, list_checkpoints(run_dir)[-1].weights)  # the counted model
    model, tokenizer = saved.model, saved.tokenizer
    assert info["parameters"] == count_parameters(model)
    assert info["model"] == {
        "d_model": 32,
        "heads": 4,
        "encoder_layers": 1,
        "decoder_layers": 2,
        "ffn_dim": 64,
        "norm": "post",
        "tie_embeddings": True,
    }
    assert info["tokenizer"] == {
        "type": "unigram",
        "joint": True,
        "src_vocab": tokenizer.src_vocab_size,
        "tgt_vocab": tokenizer.tgt_vocab_size,
    }
    assert info["steps_trained"] == 2
    assert info["checkpoints"] == [c.step for c in list_checkpoints(run_dir)]
    assert info["checkpoints"][-1] == 2


def test_an_untrained_runs_summary_counts_the_saved_model_and_no_steps(tmp_path, demo_pairs):
    run = untrained_run(tmp_path, demo_pairs[:300], model={"norm_first": True, "ffn_dim": 48})
    result = _info("--run", str(run), "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["parameters"] == count_parameters(load_run(run).model)
    assert (info["model"]["norm"], info["model"]["ffn_dim"]) == ("pre", 48)
    assert (info["steps_trained"], info["checkpoints"]) == (0, [0])
    text = _info("--run", str(run)).stdout
    assert "d_model 32, 4 heads, 1+2 layers, ffn 48, pre-norm" in text
    assert "steps trained: 0" in text and f"{info['parameters']:,}" in text


@pytest.mark.slow
def test_text_summary_names_shape_size_vocabulary_and_steps(run_dir):
    result = _info("--run", str(run_dir))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "d_model 32, 4 heads, 1+2 layers, ffn 64, post-norm" in out
    assert "steps trained: 2" in out
    assert "unigram, vocabulary" in out and "joint" in out
    params = json.loads(_info("--run", str(run_dir), "--json").stdout)["parameters"]
    assert f"{params:,}" in out


def test_best_bleu_is_the_highest_validation_bleu_in_the_log(tmp_path):
    records = [
        {"step": 1, "split": "train", "loss": 5.0, "lr": 1e-4},
        {"step": 10, "split": "valid", "loss": 4.0, "bleu": 3.5},
        {"step": 20, "split": "valid", "loss": 3.0, "bleu": 7.25},
        {"step": 30, "split": "valid", "loss": 2.9, "bleu": 6.0},
        {"step": 40, "split": "valid", "loss": 2.8},  # no BLEU measured: not a candidate
    ]
    text = "".join(json.dumps(r) + "\n" for r in records) + '{"step": 50, "spl'  # crash-cut line
    (tmp_path / "metrics.jsonl").write_text(text)
    best = best_validation(tmp_path)
    assert (best["step"], best["bleu"]) == (20, 7.25)


@pytest.mark.slow
def test_best_bleu_is_reported_with_its_step(run_dir, tmp_path):
    copy = copy_run(run_dir, tmp_path)
    with open(copy / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "split": "valid", "loss": 4.0, "bleu": 12.5}) + "\n")
    info = json.loads(_info("--run", str(copy), "--json").stdout)
    assert (info["best_bleu"], info["best_bleu_step"]) == (12.5, 2)
    assert "best BLEU:     12.50 at step 2" in _info("--run", str(copy)).stdout


def _log(run_dir: Path, *records: dict) -> None:
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


AVERAGE = "average of steps 1-2 (2)"
FINAL_CHOICE = {"step": 2, "split": "final_choice", "bleu": {"step 2": 9.5, AVERAGE: 14.25}}


@pytest.mark.slow
def test_after_a_final_choice_info_shows_the_shipped_weights_beam_bleu(run_dir, tmp_path):
    copy = copy_run(run_dir, tmp_path)
    _log(
        copy,
        {"step": 2, "split": "valid", "loss": 4.0, "bleu": 12.5},
        {**FINAL_CHOICE, "chosen": AVERAGE},
    )
    info = json.loads(_info("--run", str(copy), "--json").stdout)
    assert (info["best_bleu"], info["best_bleu_step"]) == (14.25, 2)
    assert info["best_bleu_from"] == "final_choice"
    assert info["final_choice"] == {"step": 2, "chosen": AVERAGE, "bleu": 14.25}
    text = _info("--run", str(copy)).stdout
    assert (
        f"best BLEU:     14.25 at step 2, final choice (beam, whole valid set): {AVERAGE}" in text
    )
    # The server's /info says the same.
    translator = types.SimpleNamespace(device="cpu", options=DecodeConfig())
    served = run_info(copy, list_checkpoints(copy)[-1].weights, translator, ServeConfig())
    assert (served["best_bleu"], served["best_bleu_from"]) == (14.25, "final_choice")


@pytest.mark.slow
def test_without_a_final_choice_info_shows_the_best_validation_bleu_as_before(run_dir, tmp_path):
    copy = copy_run(run_dir, tmp_path)
    _log(copy, {"step": 2, "split": "valid", "loss": 4.0, "bleu": 12.5})
    info = json.loads(_info("--run", str(copy), "--json").stdout)
    assert (info["best_bleu"], info["best_bleu_from"], info["final_choice"]) == (
        12.5,
        "validation",
        None,
    )
    assert "best BLEU:     12.50 at step 2\n" in _info("--run", str(copy)).stdout


def test_a_final_choice_replaced_by_a_later_best_checkpoint_is_not_shown(tmp_path):
    _log(tmp_path, {**FINAL_CHOICE, "chosen": "step 2"})
    assert final_choice(tmp_path) == {"step": 2, "chosen": "step 2", "bleu": 9.5}
    # Resumed and trained on, the run's validation at step 6 made a new best checkpoint.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.json").write_text(json.dumps({"step": 6, "bleu": 11.0}))
    assert final_choice(tmp_path) is None


def test_a_folder_that_is_not_a_run_is_one_error_line(tmp_path):
    result = _info("--run", str(tmp_path))
    assert result.exit_code != 0
    assert result.stderr.startswith("error: ")
    assert "not a run directory" in result.stderr
    assert "Traceback" not in result.output
