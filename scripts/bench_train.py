"""Training throughput: the project beside the Hugging Face Marian peer, same data, same shape.

    python scripts/bench_train.py --seconds 120            # both, one after the other
    python scripts/bench_train.py --seconds 60 --no-peer   # the project only

Trains the "small" shape (d_model 256, 3+3 layers, 4 heads, FFN 1024, joint 8k SentencePiece,
≤ 4096 padded tokens a batch, post-norm, dropout 0.1, Adam (0.9, 0.98), lr 5e-4, warm-up 1000,
label smoothing 0.1) on ../shared/data/enfr for a fixed time each, with the same SentencePiece
model (the project trains it; the peer reuses it), and prints the median target tokens/s over
steps after the first 10, the padding ratio of the project's batches and each process's peak RSS.
The peer is ../shared/bench/peers/hf_marian_train.py run with the peers' own Python.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO.parent / "shared" / "bench" / "peers"
PEER_PY = (
    Path(os.environ.get("PEERS_VENV", Path.home() / ".cache/seq2seq-peers/venv")) / "bin/python"
)
WARMUP_STEPS = 10  # excluded from the median, as the peer script does

CONFIG = """\
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


def run_measured(cmd: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """Run a command; return its exit status, wall seconds and peak RSS (MB) of that process."""
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage.ru_maxrss / 1024


def project(args, out: Path, env: dict[str, str]) -> dict:
    run = out / "project"
    config = out / "project.yaml"
    config.write_text(
        CONFIG.format(
            run=run,
            data=args.data,
            max_tokens=args.max_tokens,
            minutes=args.seconds / 60,
            threads=args.threads,
            precision=args.precision,
            compile=str(args.compile).lower(),
        )
    )
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "train", "--config", str(config)]
    code, wall, rss = run_measured(cmd, env, out / "project.log")
    if code != 0:
        sys.exit(f"project training failed (exit {code}); see {out / 'project.log'}")
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    speeds = [r["tokens_per_s"] for r in train if r["step"] > WARMUP_STEPS]
    return {
        "system": "seq2seq",
        "steps": train[-1]["step"],
        "tok_s_median": statistics.median(speeds),
        "peak_rss_mb": rss,
        "padding": padding_of(run, args.max_tokens),
        "wall_s": wall,
    }


def padding_of(run: Path, max_tokens: int) -> float:
    """Padding share of all source and target positions in the project's epoch-0 batches."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from seq2seq.batching import epoch_batches
    from seq2seq.config import load_run_config
    from seq2seq.data import lengths, load_corpus, tokenize

    cfg = load_run_config(run)
    raw = load_corpus(cfg.data.train, cfg.data.src_lang, cfg.data.tgt_lang)
    ds, _ = tokenize(raw, run, True, cfg.data.max_len)  # cached by the training run
    src, tgt = lengths(ds)
    real = total = 0
    for b in epoch_batches(src, tgt, max_tokens, cfg.train.seed, 0):
        real += int(src[b].sum() + tgt[b].sum())
        total += len(b) * int(src[b].max() + tgt[b].max())
    return 1 - real / total


def peer(args, out: Path, env: dict[str, str]) -> dict:
    folder = out / "peer"
    cmd = [
        str(PEER_PY),
        str(PEERS / "hf_marian_train.py"),
        "--data",
        str(args.data),
        "--spm",
        str(out / "project" / "tokenizer" / "spm.model"),
        "--out",
        str(folder),
        "--seconds",
        str(args.seconds),
        "--max-tokens",
        str(args.max_tokens),
        "--warmup",
        "1000",
        "--warmup-steps-excluded",
        str(WARMUP_STEPS),
    ]
    code, wall, rss = run_measured(
        cmd, {**env, "BENCH_THREADS": str(args.threads)}, out / "peer.log"
    )
    if code != 0:
        sys.exit(f"peer training failed (exit {code}); see {out / 'peer.log'}")
    m = json.loads((folder / "metrics.json").read_text())
    return {
        "system": "hf-marian (peer)",
        "steps": m["train_steps"],
        "tok_s_median": m["train_tok_s_median"],
        "peak_rss_mb": rss,
        "padding": None,
        "wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    p.add_argument("--seconds", type=float, default=120.0, help="training time of each system")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--compile", action="store_true", help="train.compile: true for the project")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-train"))
    args = p.parse_args()
    if not (args.data / "train.en").is_file():
        sys.exit(f"no corpus at {args.data} (expected train.en/train.fr)")
    if not args.no_peer and not PEER_PY.is_file():
        sys.exit(f"peer Python not found at {PEER_PY}: run {PEERS / 'setup.sh'} or --no-peer")
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in ("project", "peer"):
        subprocess.run(["rm", "-rf", str(args.out / stale)], check=True)
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(args.threads),
    }

    rows = [project(args, args.out, env)]
    if not args.no_peer:
        rows.append(peer(args, args.out, env))
    print(
        f"\ntraining throughput, {args.seconds:.0f} s each, {args.threads} threads, "
        f"≤{args.max_tokens} padded tokens a batch, precision {args.precision}"
    )
    print(f"{'system':<18} {'steps':>6} {'tgt tok/s':>10} {'padding':>8} {'peak RSS':>10}")
    for r in rows:
        pad = f"{100 * r['padding']:.1f}%" if r["padding"] is not None else "-"
        print(
            f"{r['system']:<18} {r['steps']:>6} {r['tok_s_median']:>10,.0f} {pad:>8} "
            f"{r['peak_rss_mb']:>8,.0f} MB"
        )
    if len(rows) == 2:
        print(
            f"speed ratio project/peer: {rows[0]['tok_s_median'] / rows[1]['tok_s_median']:.2f}×; "
            f"memory ratio: {rows[0]['peak_rss_mb'] / rows[1]['peak_rss_mb']:.2f}×"
        )
    (args.out / "bench_train.json").write_text(
        json.dumps({"args": vars(args), "rows": rows}, indent=2, default=str)
    )


if __name__ == "__main__":
    main()
