"""Beyond one torchrun: two nodes meeting at one rendezvous, elastic restarts after a SIGKILL,
and the messages a user gets when a rank fails or the nodes never meet (gloo on CPU)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from seq2seq.cli.app import app, tokens_per_update
from seq2seq.config import validate_config
from seq2seq.data.corpus import prepare_data
from seq2seq.errors import UserError
from seq2seq.train import elastic
from seq2seq.train.distributed import Dist
from tests.runs import write_parallel

REPO = Path(__file__).resolve().parents[1]

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 48
tokenizer: {{vocab_size: 300}}
model: {{d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, ffn_dim: 64,
        dropout: {dropout}, max_positions: 64}}
train: {{max_tokens: 400, max_steps: {steps}, warmup_steps: 2, log_every: 1, eval_every: 1000,
        save_every: {save_every}, keep_last: 10, threads: 1, update_freq: {update_freq},
        eps: 1.0e-3}}
"""
# eps=1e-3: see test_distributed.py (Adam's first updates stay smooth in the gradient).

# `seq2seq train`, plus: each rank writes its final weights (so ranks can be compared), and a
# fault is injected on the first attempt of the group when SEQ2SEQ_TEST_FAULT says so:
# "raise:RANK:STEP" raises after that update, "kill:RANK:STEP" SIGKILLs the process.
RUNNER = """
import os, signal, sys
from safetensors.torch import save_model
from seq2seq.train import trainer
fault = os.environ.get("SEQ2SEQ_TEST_FAULT")
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
run, update = trainer._Loop.run, trainer._Loop._update
def update_with_fault(self, *args):
    stop = update(self, *args)
    if fault and first_attempt:
        kind, rank, step = fault.split(":")
        if self.info.rank == int(rank) and self.state.step == int(step):
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected fault on rank {{rank}} at step {{step}}")
    return stop
def run_and_dump(self, progress=True):
    run(self, progress)
    save_model(self.model, f"{out}/rank{{self.info.rank}}.safetensors")
trainer._Loop._update = update_with_fault
trainer._Loop.run = run_and_dump
from seq2seq.cli.app import main
sys.argv = ["seq2seq", "train", *sys.argv[1:]]
main()
"""

TRAINED_TOKENIZER = "tokenizer: training SentencePiece"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("SEQ2SEQ_TEST_FAULT", None)
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A tiny corpus, a config and the runner in one folder."""

    def __init__(self, folder: Path, pairs):
        self.folder = folder
        data = folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        write_parallel(data, "train", pairs)
        self.out = folder / "out"
        self.out.mkdir(exist_ok=True)
        self.runner = folder / "runner.py"
        self.runner.write_text(RUNNER.format(out=self.out))
        self.data = data

    def config(self, name: str, **settings) -> Path:
        values = {"dropout": 0.0, "steps": 3, "save_every": 1, "update_freq": 1, **settings}
        path = self.folder / f"{name}.yaml"
        path.write_text(CONFIG.format(run=self.folder / name, data=self.data, **values))
        return path

    def rank_weights(self, rank: int) -> dict[str, torch.Tensor]:
        return load_file(str(self.out / f"rank{rank}.safetensors"))


def launch(*args: str, env=None, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """One torchrun agent (through seq2seq.launch), its output captured."""
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "seq2seq.launch", *args],
        cwd=REPO,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(*agents: subprocess.Popen, timeout: float = 240) -> list[tuple[int, str]]:
    results = []
    for agent in agents:
        try:
            out, _ = agent.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for a in agents:
                a.kill()
            raise
        results.append((agent.returncode, out))
    return results


def train_single(config: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq", "train", "--config", str(config)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def two_nodes(job: Job, config: Path, hosts=("127.0.0.1", "127.0.0.1"), node_env=None, prefix=None):
    """Two agents, two processes each, meeting at a c10d rendezvous hosted by the first."""
    port, rdzv_id = _free_port(), uuid.uuid4().hex[:8]
    agents = [
        launch(
            "--nnodes=2",
            "--nproc-per-node=2",
            f"--node-rank={node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={hosts[0]}:{port}",
            f"--rdzv-id={rdzv_id}",
            # Both nodes share a hostname here, so say which hosts the rendezvous store.
            f"--rdzv-conf=is_host={int(node == 0)},join_timeout=60",
            f"--local-addr={hosts[node]}",
            str(job.runner),
            "--config",
            str(config),
            env=_env(**(node_env[node] if node_env else {})),
            prefix=prefix[node] if prefix else (),
        )
        for node in (0, 1)
    ]
    return finish(*agents)


def check_four_ranks_match_one_process(job: Job, results, multi: Path, single: Path) -> None:
    for code, out in results:
        assert code == 0, out[-3000:]
    weights = [job.rank_weights(rank) for rank in range(4)]
    for rank in (1, 2, 3):
        for name, tensor in weights[0].items():
            assert torch.equal(tensor, weights[rank][name]), f"rank {rank} differs in {name}"
    # Three updates of four ranks' batches == one process accumulating the same four batches.
    one = load_file(str(single / "checkpoints" / "step_00000003.safetensors"))
    for name, tensor in weights[0].items():
        assert torch.allclose(tensor, one[name], atol=1e-5, rtol=1e-4), name
    # One run directory's worth of logs and checkpoints, written by global rank 0 alone.
    records = [json.loads(x) for x in (multi / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("split") == "train"] == [1, 2, 3]
    assert sorted(p.name for p in (multi / "checkpoints").glob("step_*.safetensors")) == [
        f"step_0000000{i}.safetensors" for i in (1, 2, 3)
    ]
    both = "".join(out for _, out in results)
    assert both.count(TRAINED_TOKENIZER) == 1, "the tokenizer must be trained once per job"
    assert "4 processes" in both


@pytest.mark.slow
def test_two_nodes_of_two_processes_match_one_process_accumulating_four_batches(
    tmp_path, demo_pairs
):
    job = Job(tmp_path, demo_pairs[:1200])
    multi, single = job.config("multi"), job.config("single", update_freq=4)
    results = two_nodes(job, multi)
    train_single(single)
    check_four_ranks_match_one_process(job, results, tmp_path / "multi", tmp_path / "single")


def _netns_available() -> str | None:
    """Why two network namespaces joined by a veth pair cannot be made here (None: they can)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    probe = f"s2sprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.mark.slow
def test_two_nodes_in_their_own_network_namespaces_over_a_veth_pair(tmp_path, demo_pairs):
    why = _netns_available()
    if why:
        pytest.skip(why)
    tag = f"{os.getpid() % 10000}"
    names, links = (f"s2sa{tag}", f"s2sb{tag}"), (f"s2va{tag}", f"s2vb{tag}")
    net = f"10.{os.getpid() % 200 + 20}.{int(tag) % 250}"
    hosts = (f"{net}.1", f"{net}.2")
    setup = [
        ["ip", "netns", "add", names[0]],
        ["ip", "netns", "add", names[1]],
        ["ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1]],
    ]
    for i in (0, 1):
        setup += [
            ["ip", "link", "set", links[i], "netns", names[i]],
            ["ip", "-n", names[i], "addr", "add", f"{hosts[i]}/24", "dev", links[i]],
            ["ip", "-n", names[i], "link", "set", links[i], "up"],
            ["ip", "-n", names[i], "link", "set", "lo", "up"],
        ]
    try:
        for command in setup:
            made = subprocess.run(command, capture_output=True, text=True)
            if made.returncode != 0:  # a sandbox may allow namespaces but not veth links
                pytest.skip(f"`{' '.join(command)}` failed: {made.stderr.strip()}")
        job = Job(tmp_path, demo_pairs[:1200])
        multi, single = job.config("multi"), job.config("single", update_freq=4)
        results = two_nodes(
            job,
            multi,
            hosts=hosts,
            # gloo would otherwise pick the address the (shared) hostname resolves to.
            node_env=[{"GLOO_SOCKET_IFNAME": link} for link in links],
            prefix=[("ip", "netns", "exec", name) for name in names],
        )
        train_single(single)
        check_four_ranks_match_one_process(job, results, tmp_path / "multi", tmp_path / "single")
    finally:
        for name in names:  # deleting a namespace deletes its end of the veth pair too
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_restarted_and_ends_bit_identical(tmp_path, demo_pairs):
    job = Job(tmp_path, demo_pairs[:1200])
    settings = {"dropout": 0.1, "steps": 6, "save_every": 2}  # dropout: its RNG must resume too
    restarted, whole = job.config("restarted", **settings), job.config("whole", **settings)
    standalone = ["--standalone", "--nproc-per-node=2", "--max-restarts=2", str(job.runner)]

    env = _env(SEQ2SEQ_TEST_FAULT="kill:1:3")  # after update 3; the last checkpoint is step 2
    [(code, out)] = finish(launch(*standalone, "--config", str(restarted), env=env))
    assert code == 0, out[-3000:]
    assert "torchrun restarted the workers: resuming from the run's latest checkpoint" in out
    assert "resumed from" in out and "(step 2)" in out
    killed = {r: job.rank_weights(r) for r in (0, 1)}

    [(code, out)] = finish(launch(*standalone, "--config", str(whole)))
    assert code == 0, out[-3000:]
    for rank in (0, 1):
        for name, tensor in job.rank_weights(rank).items():
            assert torch.equal(killed[rank][name], tensor), f"rank {rank} differs in {name}"
    # The log reads like one run: each step once (the lost step 3 is not left in it).
    records = [
        json.loads(x) for x in (tmp_path / "restarted" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r.get("split") == "train"] == [1, 2, 3, 4, 5, 6]
    assert not list((tmp_path / "restarted" / "checkpoints").glob(".tmp*"))


@pytest.mark.slow
def test_a_rank_that_raises_stops_the_job_and_its_error_is_shown_once(tmp_path, demo_pairs):
    job = Job(tmp_path, demo_pairs[:1200])
    config = job.config("run", steps=6)
    start = time.monotonic()
    agent = launch(
        "--standalone",
        "--nproc-per-node=2",
        str(job.runner),
        "--config",
        str(config),
        env=_env(SEQ2SEQ_TEST_FAULT="raise:1:2"),
    )
    [(code, out)] = finish(agent, timeout=180)
    assert code == 1
    assert time.monotonic() - start < 120, "a failed rank must not leave the others waiting"
    assert out.count("RuntimeError: injected fault on rank 1 at step 2") == 1, out[-3000:]
    # The other rank says why it stopped in one line, not with gloo's traceback.
    assert "rank 0: stopping, another process of the job stopped" in out
    assert "[rank0]: Traceback" not in out
    assert "error: the training job failed: rank 1" in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["c10d", "static"])
def test_a_rendezvous_that_cannot_form_times_out_naming_its_endpoint(tmp_path, backend):
    port = _free_port()
    if backend == "c10d":
        where = [f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=lonely"]
        where += ["--rdzv-backend=c10d", "--rdzv-conf=join_timeout=3"]
    else:
        where = ["--master-addr=127.0.0.1", f"--master-port={port}", "--node-rank=0"]
        where += ["--rdzv-conf=timeout=3"]
    script = tmp_path / "never_runs.py"
    script.write_text("raise SystemExit('a worker started without its second node')\n")
    start = time.monotonic()
    [(code, out)] = finish(
        launch("--nnodes=2", "--nproc-per-node=1", *where, str(script)), timeout=120
    )
    assert code == 1
    assert time.monotonic() - start < 60
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: the ") and f"127.0.0.1:{port}" in last, out[-2000:]
    assert "did not form within 3 s" in last
    assert "a worker started" not in out


def test_a_restarted_worker_group_resumes_without_being_asked(monkeypatch):
    one = Dist()
    cpu = torch.device("cpu")
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert not elastic.resuming(False, one, cpu)
    assert elastic.resuming(True, one, cpu)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert not elastic.resuming(False, one, cpu)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert elastic.resuming(False, one, cpu)


def test_a_broken_collective_is_told_apart_from_a_rank_s_own_error():
    gloo = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:6826. This is typically caused by a remote worker crashing."
    )
    assert elastic.peer_gone(gloo)
    assert not elastic.peer_gone(RuntimeError("CUDA out of memory"))
    assert not elastic.peer_gone(ValueError("connection closed by peer"))  # not from a collective


def test_tokens_per_update_counts_every_process_and_says_how_to_keep_the_paper_s():
    assert tokens_per_update(3125, 1, 8).startswith("tokens per update: 25,000 = ")
    eight = tokens_per_update(25000, 1, 8)
    assert "200,000" in eight and "8× the paper's" in eight and "max_tokens 3,125" in eight
    assert "max_tokens 391" in tokens_per_update(25000, 1, 64)
    assert "paper's ~25,000:" not in tokens_per_update(2048, 1, 1)  # one process: no advice


def test_dry_run_prints_tokens_per_update_for_the_world_size_it_is_launched_with(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "3")
    result = CliRunner().invoke(app, ["train", "--config", "configs/en-fr.yaml", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "tokens per update: 200,000 = max_tokens 25,000 × update_freq 1 × world size 8" in (
        result.output
    )


def test_a_rank_other_than_0_never_trains_the_tokenizer(tmp_path, demo_pairs):
    write_parallel(tmp_path, "train", demo_pairs[:200])
    train = {"src": str(tmp_path / "train.en"), "tgt": str(tmp_path / "train.fr")}
    settings = {"run_dir": str(tmp_path / "run"), "data": {"train": train}}
    cfg = validate_config({**settings, "tokenizer": {"vocab_size": 100}}, source="the test")
    with pytest.raises(UserError, match="filesystem they all share"):
        prepare_data(cfg, reuse_tokenizer=True, may_train=False)


SRUN = """#!/bin/bash
# srun for the test: each of the job's "nodes" is one more copy of the command on this machine.
while [[ $1 == --* ]]; do shift; done
pids=()
for _ in $(seq "$SLURM_JOB_NUM_NODES"); do "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.slow
def test_the_slurm_script_trains_on_two_nodes(tmp_path, demo_pairs):
    job = Job(tmp_path, demo_pairs[:1200])
    config = job.config("run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho 127.0.0.1\n")  # show hostnames
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    env = _env(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        SLURM_JOB_NUM_NODES="2",
        SLURM_JOB_NODELIST="node[0-1]",
        SLURM_JOB_ID=uuid.uuid4().hex[:8],
        NPROC_PER_NODE="1",
        RDZV_PORT=str(_free_port()),
    )
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm_train.sh"), str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 processes" in proc.stderr
    assert (tmp_path / "run" / "checkpoints" / "step_00000003.safetensors").is_file()


@pytest.mark.slow
def test_sigterm_to_the_agent_stops_every_rank_after_one_update_and_saves_it(tmp_path, demo_pairs):
    job = Job(tmp_path, demo_pairs[:1200])
    config = job.config("run", steps=100000, save_every=100000)
    agent = launch(
        "--standalone", "--nproc-per-node=2", "-m", "seq2seq", "train", "-c", str(config)
    )
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while '"split": "train"' not in (metrics.read_text() if metrics.is_file() else ""):
        assert time.monotonic() < deadline and agent.poll() is None, "training did not start"
        time.sleep(0.2)
    agent.terminate()
    [(code, out)] = finish(agent, timeout=120)
    assert code == 143, out[-3000:]
    stopped = {line for line in out.splitlines() if line.startswith("stopped by SIGTERM at step")}
    assert len(stopped) == 2, stopped  # the same step on both ranks, said two ways
    step = int(next(iter(stopped)).split()[5].rstrip(";"))
    saved = sorted((tmp_path / "run" / "checkpoints").glob("step_*.safetensors"))
    assert saved[-1].name == f"step_{step:08d}.safetensors"
    assert out.strip().splitlines()[-1] == "stopped by SIGTERM: continue the run with --resume"


def test_a_forked_worker_starts_with_default_signal_handlers(monkeypatch):
    # The agent's handlers raise torchrun's SignalException; inherited by a forked worker
    # still preparing its data, a SIGTERM became a traceback instead of the agent's one line.
    import signal

    from seq2seq import launch

    seen = {}

    def worker_main():
        seen["term"] = signal.getsignal(signal.SIGTERM)
        seen["int"] = signal.getsignal(signal.SIGINT)

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(launch, "cli_main", worker_main)
    try:
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, lambda *_: None)
        launch.train_in_fork("train", "--config", "x.yaml")
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert seen == {"term": signal.SIG_DFL, "int": signal.default_int_handler}


def test_a_start_failure_is_named_as_itself_unless_the_rendezvous_timed_out():
    from torch.distributed import DistError, DistStoreError
    from torch.distributed import run as torchrun

    from seq2seq.launch import start_failure_message

    args = torchrun.parse_args(
        ["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.9:29400", "x.py"]
    )
    refused = start_failure_message(args, DistError("Connection refused\nmore detail"))
    assert refused.startswith("the training job could not start: DistError: Connection refused")
    assert "10.0.0.9:29400" in refused and "did not form" not in refused
    waited = start_failure_message(args, DistStoreError("Timed out after 3 seconds"))
    assert "did not form within 600 s" in waited and "10.0.0.9:29400" in waited
