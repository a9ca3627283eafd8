"""Non-finite losses and gradients: an update that has one is skipped (weights, optimizer and lr
schedule untouched) and logged; `train.max_nonfinite` of them in a row stop training with the
last good state saved and one `error:` line. The faults are injected into the real training
loop by making the loss module's output NaN (or its gradient infinite) at chosen calls."""

from __future__ import annotations

import itertools
import json
import logging
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import load_config
from seq2seq.run.checkpoint import latest_checkpoint, load_state
from seq2seq.run.rundir import load_run
from seq2seq.train import setup as training_setup
from seq2seq.train.loss import TranslationLoss
from seq2seq.train.schedule import inverse_sqrt_scheduler
from seq2seq.train.trainer import train
from tests.runs import torchrun_train, write_parallel, write_small_config

REPO = Path(__file__).resolve().parents[1]

# Every test trains: the faults are injected into real training loops.
pytestmark = pytest.mark.slow


@pytest.fixture
def corpus(tmp_path, demo_pairs) -> tuple[Path, Path]:
    return write_parallel(tmp_path, "train", demo_pairs[:1000])


class _InfiniteGradient(torch.autograd.Function):
    """The identity forward; an infinite gradient backward (a finite loss, exploded gradients)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * math.inf


def _inject(
    monkeypatch, nan_losses=(), infinite_gradients=()
) -> dict[int, dict[str, torch.Tensor]]:
    """Spoil the training loss at the given (1-based) calls; return the weights each call saw."""
    forward = TranslationLoss.forward
    calls = itertools.count(1)
    seen: dict[int, dict[str, torch.Tensor]] = {}

    def spoiled(self, *batch):
        n = next(calls)
        seen[n] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        loss = forward(self, *batch)
        if n in nan_losses:
            return loss + float("nan")
        return _InfiniteGradient.apply(loss) if n in infinite_gradients else loss

    monkeypatch.setattr(TranslationLoss, "forward", spoiled)
    return seen


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _lrs(peak: float, warmup: int, steps: int) -> list[float]:
    """The learning rate each of `steps` counted updates used."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    schedule = inverse_sqrt_scheduler(opt, warmup)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    return out


@pytest.fixture
def trainer_warnings(caplog, monkeypatch):
    # The CLI, run in-process by other tests, stops seq2seq's records from reaching caplog.
    monkeypatch.setattr(logging.getLogger("seq2seq"), "propagate", True)
    caplog.set_level(logging.WARNING, logger="seq2seq.train.nonfinite")
    return caplog


@pytest.mark.parametrize("kind", ["loss", "gradient"])
def test_a_non_finite_update_is_skipped_logged_and_training_goes_on(
    tmp_path, corpus, monkeypatch, trainer_warnings, kind
):
    bad = {"nan_losses" if kind == "loss" else "infinite_gradients": {3}}
    seen = _inject(monkeypatch, **bad)
    cfg = load_config(write_small_config(tmp_path, corpus))

    state = train(cfg, progress=False)

    assert state.step == 6  # six counted updates, from seven batches
    assert len(seen) == 7
    assert _same(seen[4], seen[3]), "the skipped update changed the weights"
    assert not _same(seen[3], seen[2]), "a normal update should change them"
    records = _records(cfg.run_dir)
    event = next(r for r in records if r.get("event") == "nonfinite")
    assert event["step"] == 2 and event["in_a_row"] == 1
    if kind == "loss":
        assert event["loss"] == "nan"
    else:
        assert isinstance(event["loss"], float) and event["grad_norm"] in ("inf", "nan")
    train_records = [r for r in records if r.get("split") == "train"]
    assert [r["step"] for r in train_records] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(r["loss"], float) and r["loss"] == r["loss"] for r in train_records)
    # The schedule counts applied updates only: no lr step for the skipped one.
    assert [r["lr"] for r in train_records] == pytest.approx(_lrs(cfg.train.lr, 4, 6))
    warnings = [r.getMessage() for r in trainer_warnings.records]
    assert any(
        "update after step 2 skipped, weights unchanged: non-finite " + kind in w for w in warnings
    ), warnings


def test_nan_losses_in_a_row_stop_training_with_the_last_good_state_saved(
    tmp_path, corpus, monkeypatch
):
    clean = load_config(write_small_config(tmp_path, corpus, run="clean", max_steps=4))
    train(clean, progress=False)
    config = write_small_config(tmp_path, corpus, max_steps=20, max_nonfinite=3)
    _inject(monkeypatch, nan_losses=range(5, 100))

    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])

    assert result.exit_code == 1
    assert "Traceback" not in result.output + result.stderr
    assert result.stderr.splitlines()[-1] == (
        "error: training stopped at step 4: 3 non-finite losses in a row (last good state saved "
        "at step 4); start a fresh run with a lower train.lr or check the data"
    )
    assert result.stderr.count("skipped, weights unchanged: non-finite loss nan") == 3
    run = tmp_path / "run"
    saved = latest_checkpoint(run)
    assert saved.step == 4
    # Exactly the state of a run that stopped after four good updates: weights and Adam moments.
    reference = latest_checkpoint(clean.run_dir)
    assert _same(load_file(str(saved.weights)), load_file(str(reference.weights)))
    ours, theirs = load_state(saved.state), load_state(reference.state)
    for param, moments in theirs["optimizer"]["state"].items():
        assert _same(ours["optimizer"]["state"][param], moments), param
    assert ours["scheduler"]["last_epoch"] == theirs["scheduler"]["last_epoch"] == 4
    assert ours["train"]["batch_in_epoch"] == 7, "resuming goes on past the batches that failed"
    events = [r for r in _records(run) if r.get("event") == "nonfinite"]
    assert [(r["step"], r["in_a_row"]) for r in events] == [(4, 1), (4, 2), (4, 3)]

    monkeypatch.undo()  # whatever made the losses NaN is fixed
    cfg = load_config(config, ["train.max_steps=6"])
    load_run(run, saved.weights)
    assert train(cfg, resume=True, progress=False).step == 6
    assert [r["step"] for r in _records(run) if r.get("event") == "nonfinite"] == [4, 4, 4]


def test_a_good_update_ends_the_run_of_non_finite_ones(tmp_path, corpus, monkeypatch):
    _inject(monkeypatch, nan_losses={2, 3, 5, 6})
    cfg = load_config(write_small_config(tmp_path, corpus, max_nonfinite=3))
    assert train(cfg, progress=False).step == 6
    events = [r for r in _records(cfg.run_dir) if r.get("event") == "nonfinite"]
    assert [(r["step"], r["in_a_row"]) for r in events] == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_under_fp16_an_overflowing_gradient_is_the_scalers_business_and_a_nan_loss_a_fault(
    tmp_path, corpus, monkeypatch
):
    # fp16 training is refused on CPU; here the loop runs with fp16 autocast and its scaler anyway.
    monkeypatch.setattr(training_setup, "autocast_dtype", lambda device, precision: torch.float16)
    _inject(monkeypatch, infinite_gradients={2, 3, 4, 5}, nan_losses={8})
    cfg = load_config(write_small_config(tmp_path, corpus, max_nonfinite=2))

    state = train(cfg, progress=False)

    assert state.step == 6  # four overflows in a row, yet max_nonfinite 2 did not stop it
    events = [r for r in _records(cfg.run_dir) if r.get("event") == "nonfinite"]
    assert [(r["step"], r["loss"], r["in_a_row"]) for r in events] == [(3, "nan", 1)]
    scaler = load_state(latest_checkpoint(cfg.run_dir).state)["scaler"]
    assert scaler["scale"] == 2.0**16 / 2**5  # halved for each of the five skipped updates


# Rank 1 alone sees NaN losses from its 3rd batch on; rank 0's losses stay finite.
RANK1_NAN = """
import itertools, os, sys
from seq2seq.train.loss import TranslationLoss
forward, calls = TranslationLoss.forward, itertools.count(1)
def spoiled(self, *batch):
    loss = forward(self, *batch)
    bad = os.environ["RANK"] == "1" and next(calls) >= 3
    return loss + float("nan") if bad else loss
TranslationLoss.forward = spoiled
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "--quiet", "train", *sys.argv[1:]]
main()
"""


def test_processes_agree_to_skip_and_to_stop_when_one_sees_nan_losses(tmp_path, corpus):
    config = write_small_config(tmp_path, corpus, max_steps=20, max_nonfinite=2, max_tokens=256)
    script = tmp_path / "rank1_nan.py"
    script.write_text(RANK1_NAN)
    proc = torchrun_train(script, config)
    assert proc.returncode != 0
    stopped = "training stopped at step 2: 2 non-finite losses in a row"
    assert proc.stderr.count(f"error: {stopped}") == 2, proc.stderr[-3000:]  # both ranks
    run = tmp_path / "run"
    assert latest_checkpoint(run).step == 2
    events = [r for r in _records(run) if r.get("event") == "nonfinite"]
    assert [(r["step"], r["loss"]) for r in events] == [(2, "nan"), (2, "nan")]
