"""A disk that fills up while a checkpoint is written: training stops with one `error:` line
naming the file and the OS's reason, the checkpoints written before stay intact and loadable,
no partial file is left that could pass for a checkpoint, and `--resume` goes on once there is
room again."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import load_config
from seq2seq.files import atomic_write_stream
from seq2seq.run import checkpoint
from seq2seq.run.checkpoint import list_checkpoints, load_state
from seq2seq.run.rundir import load_run
from seq2seq.train import trainer
from seq2seq.train.trainer import train
from tests.runs import torchrun_train, write_parallel, write_small_config

REPO = Path(__file__).resolve().parents[1]
FULL = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def corpus(tmp_path, demo_pairs):
    return write_parallel(tmp_path, "train", demo_pairs[:1000])


def _full_disk_at(monkeypatch, step: int, which: str, keep: dict) -> None:
    """Make the `which` file ("state" or "weights") of `step`'s checkpoint hit a full disk,
    half-way through its bytes; first copy into `keep` what the checkpoints folder holds."""
    save_checkpoint, write, save_model = trainer.save_checkpoint, os.write, checkpoint.save_model
    filling = False

    def write_until_full(fd, data):
        if not filling:
            return write(fd, data)
        if len(data) > 1:
            return write(fd, memoryview(data)[: len(data) // 2])  # short: the disk fills up
        raise FULL

    def save_model_until_full(model, path, metadata=None):
        if filling:
            with open(path, "wb") as f:
                f.write(b"half a checkpoint")
            raise FULL
        return save_model(model, path, metadata=metadata)

    def save(run_dir, at, model, state):
        nonlocal filling
        if at == step:
            folder = checkpoint.checkpoint_dir(run_dir)
            keep.update({p.name: p.read_bytes() for p in folder.iterdir()})
        filling = at == step
        try:
            return save_checkpoint(run_dir, at, model, state)
        finally:
            filling = False

    monkeypatch.setattr(trainer, "save_checkpoint", save)
    if which == "state":
        monkeypatch.setattr(os, "write", write_until_full)
    else:
        monkeypatch.setattr(checkpoint, "save_model", save_model_until_full)


@pytest.mark.slow
@pytest.mark.parametrize("which, suffix", [("state", ".state.pt"), ("weights", ".safetensors")])
def test_a_full_disk_while_saving_stops_training_and_keeps_the_checkpoints_before(
    tmp_path, corpus, monkeypatch, which, suffix
):
    config = write_small_config(tmp_path, corpus, max_steps=6, save_every=2)
    before: dict[str, bytes] = {}
    _full_disk_at(monkeypatch, 4, which, before)

    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])

    assert result.exit_code == 1
    assert "Traceback" not in result.output + result.stderr
    run = tmp_path / "run"
    failed = run / "checkpoints" / f"step_00000004{suffix}"
    assert result.stderr.count("error:") == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: cannot write {failed}: No space left on device; the files saved before are "
        "intact: free some space, then continue with --resume"
    )
    # Exactly the files of the step-2 checkpoint, byte for byte: no temporary, no lone state.
    folder = run / "checkpoints"
    assert sorted(before) == ["step_00000002.safetensors", "step_00000002.state.pt"]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert [c.step for c in list_checkpoints(run)] == [2]
    cfg = load_config(config)
    load_run(run, folder / "step_00000002.safetensors")
    assert load_state(folder / "step_00000002.state.pt")["train"]["step"] == 2

    monkeypatch.undo()  # space freed
    assert train(cfg, resume=True, progress=False).step == 6
    assert [c.step for c in list_checkpoints(run)] == [2, 4, 6]


def test_a_full_disk_under_torch_save_is_reported_as_the_os_error(tmp_path, monkeypatch):
    # torch.save turns a failed write of its file object into "unexpected pos"; not ours.
    write = os.write
    calls = 0

    def fills_on_the_third_write(fd, data):
        nonlocal calls
        calls += 1
        if calls >= 3:
            raise FULL
        return write(fd, data)

    path = tmp_path / "state.pt"
    monkeypatch.setattr(os, "write", fills_on_the_third_write)
    with pytest.raises(OSError) as caught:
        atomic_write_stream(path, lambda f: torch.save({"x": torch.zeros(1000)}, f))
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


# Rank 0 writes the checkpoints; its disk is full from step 2 on.
RANK0_DISK_FULL = """
import errno, sys
from seq2seq.run import checkpoint
save = checkpoint.save_model
def save_until_full(model, path, metadata=None):
    if metadata and metadata.get("step") == "2":
        raise OSError(errno.ENOSPC, "No space left on device")
    return save(model, path, metadata=metadata)
checkpoint.save_model = save_until_full
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "--quiet", "train", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_every_process_stops_when_rank_0_cannot_save(tmp_path, corpus):
    config = write_small_config(tmp_path, corpus, max_steps=20, save_every=1, max_tokens=256)
    script = tmp_path / "rank0_disk_full.py"
    script.write_text(RANK0_DISK_FULL)
    proc = torchrun_train(script, config)
    assert proc.returncode != 0
    failed = tmp_path / "run" / "checkpoints" / "step_00000002.safetensors"
    assert proc.stderr.count(f"error: cannot write {failed}: No space left") == 1, proc.stderr
    assert "error: rank 1: stopping with rank 0, which failed" in proc.stderr
    assert [c.step for c in list_checkpoints(tmp_path / "run")] == [1]
