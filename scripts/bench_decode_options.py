"""Decode speed before and after a change of decoding options: `seq2seq translate` end to end.

    python scripts/bench_decode_options.py --run R --variant "--length-penalty 1.5" \
        --variant "--length-penalty 2.0" [--checkpoint W] [--repeats 3]

Each variant is a set of extra `seq2seq translate` options; all decode the same weights (the
run's default, or --checkpoint) on the shared valid split, the variants interleaved repeat by
repeat so that a drift of the machine touches each alike. A repeat is the whole command as a user
runs it (process start, model loading, sentence splitting, search, output), timed from outside;
the median is reported with the BLEU and length ratio of the output, so a faster variant that
writes shorter or worse translations shows as such.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def translate_once(run: Path, extra: list[str], src: Path, out: Path, threads: int) -> float:
    """Run `seq2seq translate` once on `src` into `out`; its wall time in seconds."""
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "translate", "--run", str(run)]
    cmd += ["--input", str(src), "--output", str(out), "--device", "cpu", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--variant", action="append", required=True, help="extra translate options")
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    p.add_argument("--src", default="valid.en")
    p.add_argument("--ref", default="valid.fr")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-decode-options"))
    args = p.parse_args()
    import sacrebleu

    args.out.mkdir(parents=True, exist_ok=True)
    src, ref = args.data / args.src, args.data / args.ref
    lines = len(src.read_text("utf-8").splitlines())
    refs = ref.read_text("utf-8").splitlines()
    weights = ["--checkpoint", str(args.checkpoint)] if args.checkpoint else []
    variants = [shlex.split(v) + weights for v in args.variant]
    times: list[list[float]] = [[] for _ in variants]
    translate_once(args.run, variants[0], src, args.out / "warm-up.txt", args.threads)
    for _ in range(args.repeats):
        for i, extra in enumerate(variants):
            hyp = args.out / f"variant{i}.txt"
            times[i].append(translate_once(args.run, extra, src, hyp, args.threads))
    rows = []
    for i, given in enumerate(args.variant):
        hyps = (args.out / f"variant{i}.txt").read_text("utf-8").splitlines()
        bleu = sacrebleu.corpus_bleu(hyps, [refs])
        seconds = statistics.median(times[i])
        rows.append(
            {
                "variant": given,
                "seconds": seconds,
                "times": times[i],
                "sent_s": lines / seconds,
                "bleu": bleu.score,
                "length_ratio": bleu.sys_len / bleu.ref_len,
            }
        )
        print(
            f"{given:<40} {lines / seconds:7.1f} sent/s  (median of {args.repeats}: "
            f"{seconds:.2f} s)  BLEU {bleu.score:.2f}  ratio {bleu.sys_len / bleu.ref_len:.3f}",
            flush=True,
        )
    result = {"run": str(args.run), "checkpoint": str(args.checkpoint), "lines": lines}
    (args.out / "results.json").write_text(json.dumps({**result, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
