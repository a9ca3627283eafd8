"""CPU decoding with and without the run's lexical shortlist (`--shortlist`): sentences/s and
BLEU on a test set, on 1 and 2 threads.

    python scripts/bench_shortlist.py --run R --data DIR
    python scripts/bench_shortlist.py --run R --data DIR --beams 1,4 --limit 500 --json out.json

DIR holds `test.<src>` / `test.<tgt>` (the run's languages; `--split` names another file stem)
and, when R has no shortlist yet (or with `--rebuild`), `train.<src>` / `train.<tgt>` to build
it from (`seq2seq shortlist`, `--k`, `--frequent`; its build time is printed). Each row: the
median sentences/s of `--repeats` timed passes over the test lines after one untimed warm-up
pass, BLEU (sacrebleu's default 13a), the share of outputs identical to the same settings
without a shortlist, and the mean target rows a batch scored. Both modes load the same
checkpoint in one process and decode the same lines in the same batches. On a shared machine
run it under `flock -x /work/cpu.lock`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import sacrebleu
import torch

from seq2seq.config import load_run_config, run_decode
from seq2seq.decode.segments import flatten
from seq2seq.decode.shortlist import build_run_shortlist, shortlist_path
from seq2seq.decode.translator import Translator, load_translator


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--split", default="test", help="file stem of the test set in --data")
    p.add_argument("--threads", default="1,2", help="comma-separated CPU thread counts")
    p.add_argument("--beams", default="1", help="comma-separated beam sizes (1: greedy)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="only the first N test lines (0: all)")
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--frequent", type=int, default=50)
    p.add_argument("--rebuild", action="store_true", help="build the shortlist even if R has one")
    p.add_argument("--json", type=Path, help="also write the rows here")
    return p.parse_args()


def _lines(path: Path, limit: int) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[:limit] if limit else lines


def mean_rows(translator: Translator, lines: list[str]) -> float:
    """The mean number of target ids a batch of `lines` scores with the translator's shortlist."""
    ids = [s.ids for s in flatten(translator.prepare(lines))]
    counts = [translator.shortlist.rows(src).numel() for _, src in translator.batched(ids)]
    return sum(counts) / max(1, len(counts))


def timed(translator: Translator, lines: list[str], repeats: int) -> tuple[list[str], float]:
    """The translations and the median sentences/s of `repeats` passes after a warm-up."""
    translator.translate(lines[:64])
    times, hyps = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        hyps = translator.translate(lines)
        times.append(time.perf_counter() - start)
    return hyps, len(lines) / statistics.median(times)


def main() -> None:
    args = _args()
    cfg = load_run_config(args.run)
    src_lang, tgt_lang = cfg.data.src_lang, cfg.data.tgt_lang
    if args.rebuild or not shortlist_path(args.run).is_file():
        train = [args.data / f"train.{lang}" for lang in (src_lang, tgt_lang)]
        start = time.perf_counter()
        path, built = build_run_shortlist(args.run, *train, k=args.k, frequent=args.frequent)
        print(f"built {path} (k={built.k}, {built.always.numel()} always kept) from {train[0]} "
              f"in {time.perf_counter() - start:.1f} s")  # fmt: skip
    src = _lines(args.data / f"{args.split}.{src_lang}", args.limit)
    refs = _lines(args.data / f"{args.split}.{tgt_lang}", args.limit)
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for beam in [int(b) for b in args.beams.split(",")]:
            decode = run_decode(args.run, beam_size=beam, batch_size=args.batch_size)
            found = {}
            for listed in (False, True):
                t, _ = load_translator(args.run, device="cpu", decode=decode, shortlist=listed)
                hyps, rate = timed(t, src, args.repeats)
                scored = mean_rows(t, src) if listed else t.tokenizer.tgt_vocab_size
                found[listed] = hyps
                same = sum(a == b for a, b in zip(hyps, found[False])) / len(hyps)
                rows.append({
                    "threads": threads, "beam": beam, "shortlist": listed,
                    "sentences_per_s": round(rate, 2),
                    "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
                    "identical": round(same, 4),
                    "rows_per_batch": round(scored, 1),
                })  # fmt: skip
                print(_row(rows[-1], rows[-2] if listed else None), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run), "rows": rows}, indent=1) + "\n")


def _row(row: dict, baseline: dict | None) -> str:
    mode = "shortlist" if row["shortlist"] else "full vocab"
    gain = ""
    if baseline is not None:
        speedup = row["sentences_per_s"] / baseline["sentences_per_s"]
        gain = f"  ×{speedup:.2f} speed, {row['bleu'] - baseline['bleu']:+.2f} BLEU"
    return (
        f"threads {row['threads']}  beam {row['beam']}  {mode:<10}  "
        f"{row['sentences_per_s']:8.1f} sent/s  BLEU {row['bleu']:6.2f}  "
        f"identical {100 * row['identical']:5.1f}%  rows/batch {row['rows_per_batch']}{gain}"
    )


if __name__ == "__main__":
    main()
