"""What the benchmark scripts share: where the peers live, measured runs, the small shape."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PEERS = SHARED / "bench" / "peers"
PEER_PY = (
    Path(os.environ.get("PEERS_VENV", Path.home() / ".cache/seq2seq-peers/venv")) / "bin/python"
)
WARMUP_STEPS = 10  # excluded from the median, as the peer scripts do

# The "small" shape every benchmark compares on (../shared/bench/peers/README.md).
SMALL_CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 128
tokenizer: {{type: unigram, vocab_size: 8000, joint: true}}
model: {{d_model: 256, heads: 4, encoder_layers: 3, decoder_layers: 3, ffn_dim: 1024,
        dropout: 0.1, norm_first: false, max_positions: 256}}
train: {{max_tokens: {max_tokens}, max_steps: 1000000, max_minutes: {minutes}, lr: 5.0e-4,
        warmup_steps: 1000, label_smoothing: 0.1, clip_norm: 0.0, log_every: 1,
        eval_every: 1000000, save_every: 1000000, threads: {threads},
        precision: {precision}, compile: {compile}}}
"""


def bench_env(threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "BENCH_THREADS": str(threads),
    }


def require_peers() -> None:
    if not PEER_PY.is_file():
        sys.exit(f"peer Python not found at {PEER_PY}: run {PEERS / 'setup.sh'}")


def run_measured(cmd: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """Run a command; return its exit status, wall seconds and peak RSS (MB) of that process."""
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage.ru_maxrss / 1024


def train_project(
    data: Path,
    out: Path,
    seconds: float,
    threads: int,
    env: dict[str, str],
    max_tokens: int = 4096,
    precision: str = "fp32",
    compile: bool = False,
) -> dict:
    """Train the small shape for `seconds`; return steps, median tok/s, peak RSS, run dir."""
    run = out / "project"
    config = out / "project.yaml"
    config.write_text(
        SMALL_CONFIG.format(
            run=run,
            data=data,
            max_tokens=max_tokens,
            minutes=seconds / 60,
            threads=threads,
            precision=precision,
            compile=str(compile).lower(),
        )
    )
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "train", "--config", str(config)]
    code, wall, rss = run_measured(cmd, env, out / "project.log")
    if code != 0:
        sys.exit(f"project training failed (exit {code}); see {out / 'project.log'}")
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    speeds = [r["tokens_per_s"] for r in train if r["step"] > WARMUP_STEPS]
    speeds = speeds or [r["tokens_per_s"] for r in train]  # a very short smoke run
    return {
        "system": "seq2seq",
        "steps": train[-1]["step"],
        "tok_s_median": statistics.median(speeds),
        "peak_rss_mb": rss,
        "wall_s": wall,
        "run": str(run),
    }


def train_peer(
    data: Path,
    spm_model: Path,
    out: Path,
    seconds: float,
    env: dict[str, str],
    max_tokens: int = 4096,
    snapshot_every: float | None = None,
) -> dict:
    """Train the HF Marian peer of the same shape for `seconds` with the given SentencePiece;
    with `snapshot_every`, also save its model every that many seconds (peer_snapshots.py)."""
    folder = out / "peer"
    script = [str(PEERS / "hf_marian_train.py")]
    if snapshot_every:
        wrapper = Path(__file__).resolve().parent / "peer_snapshots.py"
        script = [str(wrapper), "--every", str(snapshot_every), "--"]
        env = {**env, "PEERS_DIR": str(PEERS)}
    cmd = [
        str(PEER_PY),
        *script,
        "--data",
        str(data),
        "--spm",
        str(spm_model),
        "--out",
        str(folder),
        "--seconds",
        str(seconds),
        "--max-tokens",
        str(max_tokens),
        "--warmup",
        "1000",
        "--warmup-steps-excluded",
        str(WARMUP_STEPS),
    ]
    code, wall, rss = run_measured(cmd, env, out / "peer.log")
    if code != 0:
        sys.exit(f"peer training failed (exit {code}); see {out / 'peer.log'}")
    m = json.loads((folder / "metrics.json").read_text())
    snapshots = folder / "snapshots.jsonl"
    return {
        "system": "hf-marian (peer)",
        "steps": m["train_steps"],
        "tokens": m["train_tgt_tokens"],
        "train_minutes": m["train_seconds"] / 60,
        "tok_s_median": m["train_tok_s_median"],
        "peak_rss_mb": rss,
        "wall_s": wall,
        "model": str(folder / "model"),
        "snapshots": [json.loads(x) for x in snapshots.read_text().splitlines()]
        if snapshot_every
        else [],
    }
