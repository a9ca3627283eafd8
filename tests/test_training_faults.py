"""Training survives kills and signals: nothing is lost, and a resumed run ends where an
uninterrupted one does, bit for bit (CPU)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seq2seq.run.checkpoint import latest_checkpoint, list_checkpoints, load_state
from seq2seq.run.rundir import load_run
from tests.runs import write_parallel

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 16
SAVE_EVERY = 5

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 48
tokenizer: {{vocab_size: 300}}
model: {{d_model: 64, heads: 4, encoder_layers: 2, decoder_layers: 2, ffn_dim: 128,
        dropout: 0.1, max_positions: 64}}
train: {{max_tokens: 1200, max_steps: {steps}, warmup_steps: 4, log_every: 1,
        eval_every: 1000, save_every: {save_every}, keep_last: 10, threads: 1}}
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, demo_pairs) -> Path:
    folder = tmp_path_factory.mktemp("faults-data")
    write_parallel(folder, "train", demo_pairs)
    return folder


def _config(
    folder: Path, data: Path, name: str, steps: int = MAX_STEPS, save_every: int = SAVE_EVERY
) -> tuple[Path, Path]:
    run = folder / name
    path = folder / f"{name}.yaml"
    path.write_text(CONFIG.format(run=run, data=data, steps=steps, save_every=save_every))
    return path, run


def _env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _train(
    *args: str, script: str | None = None, env: dict[str, str] | None = None, log=None
) -> subprocess.Popen:
    """Start training in a new process; its output goes to pipes, or to the file `log`."""
    cmd = [sys.executable, "-m", "seq2seq", "train", *args]
    if script is not None:
        cmd = [sys.executable, "-c", script, *args]
    out = subprocess.PIPE if log is None else log
    return subprocess.Popen(
        cmd, cwd=REPO, env={**_env(), **(env or {})}, stdout=out, stderr=out, text=True
    )


def _logged_step(run: Path, since: float = 0.0) -> int:
    """The last step in the metrics log (of lines written after time `since`)."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return 0
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # being written as we read
    return max((r["step"] for r in records if r["time"] >= since), default=0)


def _wait_for_step(proc: subprocess.Popen, run: Path, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _logged_step(run) < step:
        if proc.poll() is not None:
            raise AssertionError(f"training ended early:\n{proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("training too slow to reach the step")
        time.sleep(0.005)


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(latest_checkpoint(run).weights))


def _assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_dir) -> dict[str, torch.Tensor]:
    config, run = _config(tmp_path_factory.mktemp("whole"), data_dir, "run")
    proc = _train("--config", str(config))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return _final_weights(run)


def test_resume_after_sigkill_between_checkpoints_matches_uninterrupted_run(
    tmp_path, data_dir, uninterrupted
):
    config, run = _config(tmp_path, data_dir, "run")
    proc = _train("--config", str(config))
    _wait_for_step(proc, run, SAVE_EVERY + 2)
    proc.send_signal(signal.SIGSTOP)  # freeze it where it is, then check where that is
    killed_at = _logged_step(run)
    proc.kill()
    proc.communicate()
    last_saved = latest_checkpoint(run).step
    assert last_saved < killed_at < MAX_STEPS, "the kill must fall between two checkpoints"

    resumed = _train("--config", str(config), "--resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "resumed from" in err and f"(step {last_saved})" in err
    _assert_identical(_final_weights(run), uninterrupted)
    logged = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert logged == sorted(set(logged)), "steps after the checkpoint were logged twice"


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_save_a_checkpoint_and_exit_cleanly(tmp_path, data_dir, signum, code):
    config, run = _config(tmp_path, data_dir, "run", steps=10_000)
    proc = _train("--config", str(config))
    _wait_for_step(proc, run, 3)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    stopped_at = latest_checkpoint(run).step
    assert f"stopped by {signal.Signals(signum).name} at step {stopped_at}" in out
    load_run(run, latest_checkpoint(run).weights)

    more = _train("--config", str(config), "--resume", "--set", f"train.max_steps={stopped_at + 2}")
    _, err = more.communicate(timeout=300)
    assert more.returncode == 0, err
    assert latest_checkpoint(run).step == stopped_at + 2


KILLED_WHILE_SAVING = """
import os, signal, sys
from seq2seq.run import checkpoint
save = checkpoint.save_model
def dies_half_way(model, path, metadata=None):
    if metadata and metadata.get("step") == "{step}":
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
    return save(model, path, metadata=metadata)
checkpoint.save_model = dies_half_way
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "train", *sys.argv[1:]]
main()
"""


def test_kill_during_checkpoint_write_leaves_the_previous_one_loadable(
    tmp_path, data_dir, uninterrupted
):
    config, run = _config(tmp_path, data_dir, "run")
    proc = _train("--config", str(config), script=KILLED_WHILE_SAVING.format(step=2 * SAVE_EVERY))
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert [c.step for c in list_checkpoints(run)] == [SAVE_EVERY]
    assert list((run / "checkpoints").glob(".*.tmp")), "the half-written file should be a temp"

    resumed = _train("--config", str(config), "--resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    _assert_identical(_final_weights(run), uninterrupted)
    assert not list((run / "checkpoints").glob(".*.tmp"))


# STOP_AT names a point where the training process stops itself (SIGSTOP), for the test to
# kill it exactly there:
#   write:state:N, write:weights:N  inside the write of that file of step N's checkpoint (the
#                                   weights are written as safetensors does: a `.tmpXXXXXX` file
#                                   beside the target, renamed when complete)
#   update:K                        at the start of this process's K-th update
#   startup:tokenizer               inside SentencePiece training (its temporary folder exists)
#   startup:config, startup:data    after the run directory is prepared / the data is tokenized
STOPS_ITSELF = """
import os, signal, sys, tempfile
import torch
from seq2seq.run import checkpoint
from seq2seq.data import tokenizer
from seq2seq.train import trainer, setup as training_setup
where, _, arg = os.environ.get("STOP_AT", "none:").partition(":")
def stop_here():
    os.kill(os.getpid(), signal.SIGSTOP)
save_model, save = checkpoint.save_model, torch.save
def save_model_stopping(model, path, metadata=None):
    if where == "write" and arg == "weights:" + (metadata or {}).get("step", ""):
        fd, tmp = tempfile.mkstemp(prefix=".tmp", dir=os.path.dirname(path))
        os.write(fd, b"half a checkpoint")
        stop_here()
    return save_model(model, path, metadata=metadata)
def save_stopping(obj, f, *args, **kwargs):
    if where == "write" and arg == "state:" + str(obj.get("train", {}).get("step")):
        f.write(b"half a trainer state")
        stop_here()
    return save(obj, f, *args, **kwargs)
checkpoint.save_model, torch.save = save_model_stopping, save_stopping
updates, accumulate = [0], trainer.accumulate_gradients
def accumulate_stopping(*a, **k):
    updates[0] += 1
    if where == "update" and updates[0] == int(arg):
        stop_here()
    return accumulate(*a, **k)
trainer.accumulate_gradients = accumulate_stopping
spm_train = tokenizer.spm.SentencePieceTrainer.train
def spm_train_stopping(**kwargs):
    if where == "startup" and arg == "tokenizer":
        with open(kwargs["model_prefix"] + ".model", "wb") as f:
            f.write(b"half a tokenizer")
        stop_here()
    return spm_train(**kwargs)
tokenizer.spm.SentencePieceTrainer.train = spm_train_stopping
def stopping_after(fn, name):
    def wrapped(*a, **k):
        out = fn(*a, **k)
        if where == "startup" and arg == name:
            stop_here()
        return out
    return wrapped
training_setup.prepare_run_dir = stopping_after(training_setup.prepare_run_dir, "config")
training_setup.prepare_data = stopping_after(training_setup.prepare_data, "data")
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "train", *sys.argv[1:]]
main()
"""


def _stopped_itself(proc: subprocess.Popen, timeout: float = 120) -> bool:
    """Wait until the process stops itself (True) or ends (False, its returncode set)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            return True
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return False
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("training neither stopped in the write nor ended")


def _assert_checkpoints_load(run: Path) -> None:
    for ckpt in list_checkpoints(run):
        load_run(run, ckpt.weights)
        assert load_state(ckpt.state)["train"]["step"] == ckpt.step


def test_ten_sigkills_at_chosen_moments_then_resume_match_an_uninterrupted_run(
    tmp_path, data_dir, uninterrupted
):
    # Each round stops itself at a known point (STOP_AT above) and is killed there: inside a
    # checkpoint file's write, inside an update, or while starting up. Nothing is left to timing.
    save_every, last_kill_step = 2, MAX_STEPS - 3
    config, run = _config(tmp_path, data_dir, "run", save_every=save_every)
    rng = random.Random(1234)
    kinds = ["startup:tokenizer", "update", "write:weights", "startup:config", "write:state"]
    kinds += ["update", "write:weights", "startup:data", "update", "write:state"]
    for round_, kind in enumerate(kinds):
        resume_from = latest_checkpoint(run).step if list_checkpoints(run) else 0
        if kind == "update" and resume_from >= last_kill_step:
            kind = "write:state"  # no step left to kill at before the run would end
        if kind == "update":
            # The K-th update of this process: steps resume_from + 1 … + K - 1 are done.
            kind = f"update:{rng.randint(1, min(4, last_kill_step - resume_from))}"
        elif kind.startswith("write"):
            # The next checkpoint or the one after it (which lets the next one complete).
            step = rng.choice([s for s in (resume_from + 2, resume_from + 4) if s <= MAX_STEPS])
            kind = f"{kind}:{step}"
        log_path = tmp_path / f"round{round_}.log"
        with open(log_path, "w") as log:
            env = {"STOP_AT": kind}
            proc = _train(
                "--config", str(config), "--resume", script=STOPS_ITSELF, env=env, log=log
            )
        assert _stopped_itself(proc), f"{kind}: {log_path.read_text()}"
        proc.kill()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, log_path.read_text()
        _assert_checkpoints_load(run)

    with open(tmp_path / "final.log", "w") as log:
        final = _train("--config", str(config), "--resume", log=log)
        assert final.wait(timeout=300) == 0, (tmp_path / "final.log").read_text()
    _assert_identical(_final_weights(run), uninterrupted)
    steps = [c.step for c in list_checkpoints(run)]
    assert steps == list(range(save_every, MAX_STEPS + 1, save_every))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == sorted(
        name for s in steps for name in (f"step_{s:08d}.safetensors", f"step_{s:08d}.state.pt")
    ), "a temporary or lone file was left behind"
    assert sorted(p.name for p in (run / "tokenizer").iterdir()) == ["spm.model", "spm.vocab"]
    assert not list(run.glob(".*.tmp"))
    _assert_checkpoints_load(run)
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps_logged = [r["step"] for r in logged if "split" in r]
    assert steps_logged == sorted(set(steps_logged)), "steps after a checkpoint were logged twice"


def test_temporaries_a_killed_writer_left_are_removed_when_the_run_starts(tmp_path, data_dir):
    config, run = _config(tmp_path, data_dir, "run", steps=2, save_every=2)
    debris = [
        run / "checkpoints" / ".tmpAb12Cd",  # safetensors' own temporary
        run / "checkpoints" / ".step_00000004.safetensors.tmp",
        run / "checkpoints" / "step_00000004.state.pt",  # a state without its weights
        run / ".config.yaml.tmp",
        run / "tokenizer" / ".spm-train-x1y2" / "spm.model",
    ]
    for path in debris:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
    kept = run / "checkpoints" / "notes.txt"  # not a temporary of this run's writers
    kept.write_text("mine")
    proc = _train("--config", str(config), "--set", "train.max_steps=1", "--resume")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert not any(p.exists() for p in debris)
    assert not (run / "tokenizer" / ".spm-train-x1y2").exists()
    assert kept.read_text() == "mine"
