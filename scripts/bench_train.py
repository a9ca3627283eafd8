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
import subprocess
import sys
from pathlib import Path

from benchlib import REPO, bench_env, require_peers, train_peer, train_project


def padding_of(run: Path, max_tokens: int) -> float:
    """Padding share of all source and target positions in the project's epoch-0 batches."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from seq2seq.config import load_run_config
    from seq2seq.data.batching import epoch_batches
    from seq2seq.data.corpus import lengths, load_corpus, tokenize

    cfg = load_run_config(run)
    raw = load_corpus(cfg.data.train, cfg.data.src_lang, cfg.data.tgt_lang)
    # The training run's settings, so this reads its cache.
    d = cfg.data
    ds, _ = tokenize(
        raw, run, True, max_len=d.max_len, max_len_ratio=d.max_len_ratio, dedup=d.dedup
    )
    src, tgt = lengths(ds)
    real = total = 0
    for b in epoch_batches(src, tgt, max_tokens=max_tokens, seed=cfg.train.seed, epoch=0):
        real += int(src[b].sum() + tgt[b].sum())
        total += len(b) * int(src[b].max() + tgt[b].max())
    return 1 - real / total


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
    if not args.no_peer:
        require_peers()
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in ("project", "peer"):
        subprocess.run(["rm", "-rf", str(args.out / stale)], check=True)
    env = bench_env(args.threads)
    ours = train_project(
        args.data,
        args.out,
        args.seconds,
        args.threads,
        env,
        args.max_tokens,
        args.precision,
        args.compile,
    )
    ours["padding"] = padding_of(Path(ours["run"]), args.max_tokens)
    rows = [ours]
    if not args.no_peer:
        peer = train_peer(
            args.data,
            Path(ours["run"]) / "tokenizer" / "spm.model",
            args.out,
            args.seconds,
            env,
            args.max_tokens,
        )
        rows.append({**peer, "padding": None})
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
