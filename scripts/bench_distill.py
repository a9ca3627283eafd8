"""A distilled student beside its teacher: BLEU, speed, file size and loaded memory, each piece
of the student's speed (shape, greedy, int8, shortlist) as its own row, and CTranslate2 int8 of
the same student as the peer.

    python scripts/bench_distill.py --teacher T --student S [--baseline B] --data DIR --out OUT

Every row decodes the whole valid split (1,000 lines) in length-sorted batches of 32 with the
peers' output cap (bench_translate.py's rule), on 1 and 2 threads, median of `--repeats`; BLEU
is on the valid test half (lines 500-1,000, never used to choose checkpoints). Memory: resident
memory a loaded model adds (RSS after load minus before, fresh process; bench_int8.py's probe).
`make bench-distill` runs the whole chain: teacher, baseline student, distillation, student,
this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench_int8 import loaded_rss
from bench_translate import decode_exported_ct2, translate_as_peers_do

TEST_FROM = 499  # valid lines 500-1,000: the test half (configs/enfr-small.yaml)

# (row, which run, beam, int8, shortlist): each row adds one piece to the one before.
ROWS = (
    ("teacher beam 4 float32", "teacher", 4, False, False),
    ("teacher greedy float32", "teacher", 1, False, False),
    ("student beam 4 float32", "student", 4, False, False),
    ("student greedy float32", "student", 1, False, False),
    ("student greedy int8", "student", 1, True, False),
    ("student greedy int8 + shortlist", "student", 1, True, True),
)


def bleu(hyps: list[str], refs: list[str]) -> float:
    """Corpus BLEU of the test half."""
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps[TEST_FROM:], [refs[TEST_FROM:]]).score


def decode_row(run: Path, beam: int, int8: bool, shortlist: bool, src, threads, repeats):
    """Outputs and median seconds of one setting, timed in this process."""
    import torch

    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    torch.set_num_threads(threads)
    changes = {"beam_size": beam, "batch_size": 32, "split_sentences": False}
    changes["quantize"] = "int8" if int8 else "none"
    extra = {"shortlist": True} if shortlist else {}
    translator, _ = load_translator(run, device="cpu", decode=run_decode(run, **changes), **extra)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        hyps = translate_as_peers_do(translator, src)
        times.append(time.perf_counter() - start)
    return hyps, statistics.median(times)


def speed_rows(runs: dict[str, Path], src, refs, threads: int, repeats: int, out: Path) -> dict:
    """Every row of ROWS at `threads`, with the speed-up over the teacher's beam 4."""
    rows = {}
    for name, who, beam, int8, shortlist in ROWS:
        hyps, seconds = decode_row(runs[who], beam, int8, shortlist, src, threads, repeats)
        slug = name.replace(" ", "_").replace("+", "").replace("__", "_")
        (out / f"{slug}.{threads}t.txt").write_text("".join(h + "\n" for h in hyps), "utf-8")
        rows[name] = {"sent_s": len(src) / seconds, "bleu_test": bleu(hyps, refs)}
    peer = decode_exported_ct2(
        runs["student"], src, refs, threads, repeats, out, compute_type="int8", beams=(1,),
        name="ct2-student-int8",
    )  # fmt: skip
    if peer is not None:
        hyps = (out / "ct2-student-int8.greedy.txt").read_text("utf-8").splitlines()
        rows["CTranslate2 int8 student greedy (peer)"] = {
            "sent_s": peer["greedy"]["sent_s"],
            "bleu_test": bleu(hyps, refs),
        }
    base = rows["teacher beam 4 float32"]["sent_s"]
    for r in rows.values():
        r["x_teacher_beam4"] = r["sent_s"] / base
    return rows


def size_rows(student: Path, out: Path) -> dict:
    """The student's float32 and int8 files and the memory each adds once loaded (all resident
    memory, and its anonymous part: the file-backed pages of a mapped checkpoint aside)."""
    from seq2seq.run.checkpoint import latest_checkpoint

    best = student / "checkpoints" / "best.safetensors"
    f32_file = best if best.is_file() else latest_checkpoint(student).weights
    probes = {
        "float32": (student, "none", f32_file),
        "int8 (quantized at load)": (student, "int8", None),
    }
    export = out / "student-int8"
    if export.is_dir():  # `seq2seq export --format int8` of the student, if made
        probes["int8 export"] = (export, "int8", export)
    rows = {}
    for name, (run, setting, files) in probes.items():
        total, anon = loaded_rss("seq2seq", run, setting)
        rows[name] = {"rss_mb": total / 2**20, "anon_mb": anon / 2**20}
        if files is not None:
            found = [files] if files.is_file() else list(files.rglob("*.safetensors"))
            rows[name]["file_mb"] = sum(f.stat().st_size for f in found) / 2**20
    for r in rows.values():
        r["x_float32_rss"] = r["rss_mb"] / rows["float32"]["rss_mb"]
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", type=Path, required=True)
    p.add_argument("--student", type=Path, required=True, help="the distilled student's run")
    p.add_argument("--baseline", type=Path, help="the same student trained on the original data")
    p.add_argument("--data", type=Path, default=Path("../shared/data/enfr"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    src = (args.data / "valid.en").read_text("utf-8").splitlines()
    refs = (args.data / "valid.fr").read_text("utf-8").splitlines()
    runs = {"teacher": args.teacher, "student": args.student}
    result: dict = {"speed": {}, "quality": {}}
    if args.baseline is not None:  # the KD gain: same student, original data, greedy
        hyps, _ = decode_row(args.baseline, 1, False, False, src, max(args.threads), 1)
        result["quality"]["baseline student greedy float32"] = bleu(hyps, refs)
    for threads in args.threads:
        result["speed"][f"{threads} threads"] = speed_rows(
            runs, src, refs, threads, args.repeats, args.out
        )
    result["size"] = size_rows(args.student, args.out)
    (args.out / "bench_distill.json").write_text(json.dumps(result, indent=2) + "\n")
    for key, rows in result["speed"].items():
        print(f"\n{key}: {'row':<40} {'sent/s':>8} {'×T-b4':>6} {'BLEU':>6}")
        for name, r in rows.items():
            print(
                f"{'':>10}{name:<40} {r['sent_s']:>8.1f} {r['x_teacher_beam4']:>6.2f} "
                f"{r['bleu_test']:>6.2f}"
            )
    for name, bleu_test in result["quality"].items():
        print(f"{name}: BLEU {bleu_test:.2f} (test half)")
    for name, r in result["size"].items():
        size = f"file {r['file_mb']:.1f} MB, " if "file_mb" in r else ""
        print(
            f"{name}: {size}loaded {r['rss_mb']:.1f} MB, anonymous {r['anon_mb']:.1f} MB "
            f"({r['x_float32_rss']:.2f}× float32)"
        )


if __name__ == "__main__":
    sys.exit(main())
