"""Multi-process training through torchrun (gloo on CPU): each rank its own batches, one set
of weights, and a step equal to one process accumulating both ranks' batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seq2seq.data.batching import update_groups
from seq2seq.errors import UserError
from seq2seq.train.distributed import Dist
from tests.runs import torchrun_train, write_parallel, write_tiny_config

REPO = Path(__file__).resolve().parents[1]

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 48
tokenizer: {{vocab_size: 300}}
model: {{d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, ffn_dim: 64,
        dropout: 0.0, max_positions: 64}}
train: {{max_tokens: 600, max_steps: 3, warmup_steps: 2, log_every: 1, eval_every: 1000,
        save_every: 1, keep_last: 10, threads: 1, update_freq: {update_freq},
        eps: 1.0e-3}}
"""
# eps=1e-3: on Adam's first steps, update ≈ g / (|g| + eps) is smooth in g, so float noise
# in near-zero gradients cannot flip a sign and the comparison below tests the gradients.

# Each rank writes its final weights, so the test can compare processes with each other.
RUNNER = """
import sys
from safetensors.torch import save_model
from seq2seq.train import trainer
run = trainer._Loop.run
def run_and_dump(self, progress=True):
    run(self, progress)
    save_model(self.model, f"{out}/rank{{self.info.rank}}.safetensors")
trainer._Loop.run = run_and_dump
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "train", *sys.argv[1:]]
main()
"""


def _env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def test_update_groups_give_each_rank_its_own_run_of_batches():
    assert update_groups(10, 0, world_size=2, rank=0, update_freq=2) == [
        (4, [0, 1]),
        (8, [4, 5]),
    ]
    assert update_groups(10, 0, world_size=2, rank=1, update_freq=2) == [
        (4, [2, 3]),
        (8, [6, 7]),
    ]
    # One process keeps a last, smaller group; resuming starts mid-epoch.
    assert update_groups(5, 2, world_size=1, rank=0, update_freq=2) == [(4, [2, 3]), (5, [4])]


@pytest.mark.slow
def test_two_processes_share_weights_and_match_one_process_on_both_batches(tmp_path, demo_pairs):
    data = tmp_path / "data"
    data.mkdir()
    write_parallel(data, "train", demo_pairs[:1200])

    ddp_run, single_run = tmp_path / "ddp", tmp_path / "single"
    ddp_cfg, single_cfg = tmp_path / "ddp.yaml", tmp_path / "single.yaml"
    ddp_cfg.write_text(CONFIG.format(run=ddp_run, data=data, update_freq=1))
    single_cfg.write_text(CONFIG.format(run=single_run, data=data, update_freq=2))
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(out=tmp_path))

    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(runner),
        "--config",
        str(ddp_cfg),
    ]
    proc = subprocess.run(
        torchrun, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = subprocess.run(
        [sys.executable, "-m", "seq2seq", "train", "--config", str(single_cfg)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]

    rank0 = load_file(str(tmp_path / "rank0.safetensors"))
    rank1 = load_file(str(tmp_path / "rank1.safetensors"))
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"ranks differ in {name}"

    # Step 1: two processes, one batch each == one process accumulating the same two batches.
    ddp_step = load_file(str(ddp_run / "checkpoints" / "step_00000001.safetensors"))
    one_step = load_file(str(single_run / "checkpoints" / "step_00000001.safetensors"))
    for name in ddp_step:
        assert torch.allclose(ddp_step[name], one_step[name], atol=1e-6, rtol=1e-5), name

    # Only rank 0 logs: one metrics line per step.
    records = [json.loads(x) for x in (ddp_run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r.get("split") != "data"]
    assert steps == [1, 2, 3]
    assert "2 processes" in proc.stderr


# The process group's collectives time out after 10 s, and rank 0's final choice takes 20 s.
SLOW_FINAL_CHOICE = """
import sys, time
from datetime import timedelta
import torch.distributed as dist
from seq2seq.train import validation
init = dist.init_process_group
dist.init_process_group = lambda *a, **k: init(*a, **{**k, "timeout": timedelta(seconds=10)})
finish = validation.Validator.finish
def slow_finish(self, state):
    time.sleep(20)
    return finish(self, state)
validation.Validator.finish = slow_finish
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "train", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_ranks_wait_for_a_final_choice_longer_than_the_collective_timeout(tmp_path, demo_pairs):
    vsrc, vtgt = write_parallel(tmp_path, "valid", demo_pairs[300:310])
    config = write_tiny_config(
        tmp_path,
        demo_pairs[:300],
        data={"valid": {"src": str(vsrc), "tgt": str(vtgt)}},
        train={"final_choice": "beam", "valid_bleu_sentences": 2},
    )
    script = tmp_path / "slow_final_choice.py"
    script.write_text(SLOW_FINAL_CHOICE)
    proc = torchrun_train(script, config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    assert [r["chosen"] for r in records if r.get("split") == "final_choice"] == ["step 2"]


def test_ranks_that_found_different_checkpoints_stop_with_one_clear_error(monkeypatch, tmp_path):
    # A lagging listing on one node gave that rank an older step; DDP hid it.
    from seq2seq.run.checkpoint import Checkpoint
    from seq2seq.train import distributed
    from seq2seq.train.setup import agree_on_resume

    mine = Checkpoint(400, tmp_path / "step_400.safetensors", tmp_path / "step_400.state.pt")
    monkeypatch.setattr(distributed, "gather", lambda value, info: [500, value])
    with pytest.raises(UserError, match=r"rank 0: step 500, rank 1: step 400"):
        agree_on_resume(mine, Dist(rank=1, world_size=2))
    monkeypatch.setattr(distributed, "gather", lambda value, info: [400, value])
    assert agree_on_resume(mine, Dist(rank=1, world_size=2)) is mine
    monkeypatch.setattr(distributed, "gather", lambda value, info: [None, value])
    with pytest.raises(UserError, match=r"rank 0: none, rank 1: step 400"):
        agree_on_resume(mine, Dist(rank=1, world_size=2))
