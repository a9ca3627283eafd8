"""The trainer's bookkeeping, without a training run: skipped non-finite updates are counted in
a row up to the limit, with a stop message that says what to change; the trainer state a
checkpoint holds (optimizer, schedule, random stream) restores exactly; a log window's train
record sums its updates."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from seq2seq.run.runlog import MetricsLog
from seq2seq.train.distributed import Dist
from seq2seq.train.log import LogWindow
from seq2seq.train.nonfinite import NonFinite
from seq2seq.train.schedule import inverse_sqrt_scheduler
from seq2seq.train.state import TrainState, restore, rng_state, set_rng_state, snapshot

CPU = torch.device("cpu")


def _skip(counter: NonFinite, loss: float, fp16: bool = False):
    state = TrainState(step=7, epoch=1, batch_in_epoch=3)
    return counter.skipped(
        loss=torch.tensor(loss),
        grad_norm=float("inf"),
        global_tokens=4.0,
        state=state,
        info=Dist(),
        device=CPU,
        fp16=fp16,
    )


def test_non_finite_updates_count_in_a_row_to_the_limit_and_a_good_one_resets_the_count():
    counter = NonFinite(limit=2)
    record = _skip(counter, float("nan"))
    assert record == {
        "event": "nonfinite",
        "loss": "nan",
        "grad_norm": "inf",
        "in_a_row": 1,
        "epoch": 1,
        "batch_in_epoch": 3,
    }
    assert not counter.too_many
    assert _skip(counter, 8.0)["loss"] == 2.0  # a finite loss, per token: the gradient's fault
    assert counter.too_many
    message = str(counter.error(step=7, clip_norm=0.0, fp16=True))
    assert message.startswith("training stopped at step 7: 2 non-finite losses or gradients")
    assert "enable clipping (train.clip_norm)" in message and "train.precision" in message
    assert "clip_norm" not in str(counter.error(step=7, clip_norm=1.0, fp16=False))
    counter.reset()
    assert (counter.in_a_row, counter.kinds) == (0, set())


def test_an_fp16_overflow_with_a_finite_loss_is_the_scalers_business_not_a_fault():
    counter = NonFinite(limit=1)
    assert _skip(counter, 3.0, fp16=True) is None
    assert counter.in_a_row == 0 and not counter.too_many
    assert _skip(counter, float("inf"), fp16=True)["in_a_row"] == 1


def _trainer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optimizer, inverse_sqrt_scheduler(optimizer, 4)


def test_a_snapshot_restores_the_optimizer_schedule_position_and_random_stream():
    model, optimizer, scheduler = _trainer(0)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    state = TrainState(step=3, epoch=2, batch_in_epoch=1, best_bleu=12.5, stopped_by="SIGTERM")
    saved = snapshot(
        state=state, optimizer=optimizer, scheduler=scheduler, scaler=scaler, rng=[rng_state()]
    )
    expected_draw = torch.rand(5)

    _, fresh_optimizer, fresh_scheduler = _trainer(1)
    back = restore(
        saved, optimizer=fresh_optimizer, scheduler=fresh_scheduler, scaler=scaler, info=Dist()
    )
    assert back == state and back.stopped_by is None  # a signal stops one session only
    assert torch.equal(torch.rand(5), expected_draw)
    assert fresh_scheduler.last_epoch == 3
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    ours, theirs = fresh_optimizer.state_dict()["state"], optimizer.state_dict()["state"]
    assert all(torch.equal(ours[k]["exp_avg"], theirs[k]["exp_avg"]) for k in theirs)


def test_random_states_of_another_world_size_are_left_and_said_so(caplog):
    saved = [rng_state(), rng_state()]  # two processes saved it
    torch.manual_seed(5)
    expected_draw = torch.rand(3)
    torch.manual_seed(5)
    with caplog.at_level(logging.WARNING, logger="seq2seq.train.state"):
        set_rng_state(saved, Dist())
    assert torch.equal(torch.rand(3), expected_draw)
    assert "saved by 2 processes, this run has 1" in caplog.text


@pytest.mark.parametrize("rank", [0, 1])
def test_each_process_takes_back_its_own_random_state(rank):
    states, draws = [], []
    for seed in (10, 11):
        torch.manual_seed(seed)
        states.append(rng_state())
        draws.append(torch.rand(3))
    set_rng_state(states, Dist(rank=rank, world_size=2))
    assert torch.equal(torch.rand(3), draws[rank])


def test_a_log_window_writes_the_per_token_loss_of_its_updates_and_starts_afresh(tmp_path):
    window = LogWindow(CPU)
    for loss, grad_norm, lr, tokens in ((12.0, 1.5, 1e-3, 8), (6.0, 0.5, 2e-3, 4)):
        window.add(torch.tensor(loss, dtype=torch.float64), torch.tensor(grad_norm), lr)
        window.count(float(tokens), tokens)
    window.pause(-1.0)  # as if the window had run one second longer
    metrics = MetricsLog(tmp_path, tensorboard=False)
    summary = window.write(metrics, step=2, info=Dist(), epoch=0)
    (record,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 2 and record["split"] == "train"
    assert record["loss"] == 1.5  # (12 + 6) / 12 tokens
    assert (record["tokens"], record["grad_norm"], record["lr"]) == (12.0, 0.5, 2e-3)
    assert 0 < record["tokens_per_s"] <= 12.0  # over more than the second taken out
    assert summary.startswith("loss=1.500 lr=2.00e-03 tok/s=")
    assert (window.tokens, window.local_tokens, window.loss.item()) == (0.0, 0, 0.0)
