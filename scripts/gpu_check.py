"""`make gpu-check`: on a CUDA machine, what only a GPU can show, as one Markdown block.

    python scripts/gpu_check.py                          # tests, training bench, decoding bench
    python scripts/gpu_check.py --data .gpu/enfr --out $OUT   # the corpus carried to the machine

1. the tests marked `cuda` (tests/test_cuda.py): bf16 step against fp32, compiled variable shapes,
   fused Adam, NCCL DDP, bf16 cached decoding, syncs per decoding step, bf16 greedy = fp32 greedy;
2. scripts/bench_gpu.py at the transformer-base shape (configs/en-fr.yaml), bf16, eager and
   compiled: tokens/s, MFU, peak memory;
3. decoding on a model it trains for --train-minutes on the GPU (the small shape, bf16) on the
   en-fr corpus (--data; the demo corpus when there is none): greedy and beam 4 tokens/s of the
   project (bf16 autocast) beside CTranslate2 float16 and int8_float16 on the same exported
   weights, the same search (len^α normalisation, HF's stopping rule) and the same batches.

Without CUDA it says so in one line and exits 0. The block goes to stdout and OUT/gpu-check.md
(the test log and the training figures as JSON beside it); scratch files go to --work.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO, bench_env, train_project  # noqa: E402


def run_cuda_tests(out: Path) -> str:
    """Run the `cuda` tests; return pytest's summary line (the log goes to OUT)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    (out / "cuda-tests.log").write_text(proc.stdout + proc.stderr)
    lines = [x for x in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", x)]
    return lines[-1].strip("= ") if lines else f"pytest exited {proc.returncode}"


def bench_training(out: Path, compile: bool, steps: int) -> dict:
    """scripts/bench_gpu.py at the base shape in bf16; its JSON figures."""
    path = out / f"bench-gpu{'-compiled' if compile else ''}.json"
    cmd = [sys.executable, str(REPO / "scripts" / "bench_gpu.py"), "--precision", "bf16"]
    cmd += ["--steps", str(steps), "--json", str(path)] + (["--compile"] if compile else [])
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    return json.loads(path.read_text())


def corpus(data: Path | None, out: Path) -> Path:
    """A folder with train/valid .en/.fr files: --data (gunzipping *.gz), else the demo corpus."""
    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    if data is None:
        from seq2seq.data.demo_corpus import write_demo_corpus

        write_demo_corpus(folder, n_train=40_000, n_valid=1_000, n_test=0)
        return folder
    for name in ("train.en", "train.fr", "valid.en", "valid.fr"):
        plain, packed = data / name, data / f"{name}.gz"
        if plain.is_file():
            shutil.copyfile(plain, folder / name)
        else:
            with gzip.open(packed, "rb") as f:
                (folder / name).write_bytes(f.read())
    return folder


def bench_decoding(data: Path, out: Path, minutes: float, repeats: int) -> dict:
    """Train the small shape on the GPU, then decode its valid set with both systems."""
    from bench_translate import decode_exported_ct2, decode_project

    trained = train_project(data, out, minutes * 60, 8, bench_env(8), 4096, "bf16")
    run = Path(trained["run"])
    src = (data / "valid.en").read_text(encoding="utf-8").splitlines()[:1000]
    refs = (data / "valid.fr").read_text(encoding="utf-8").splitlines()[:1000]
    ours = decode_project(run, src, refs, 8, repeats, out, device="cuda")
    systems = {"seq2seq (bf16 autocast)": ours}
    for i, compute in enumerate(("float16", "int8_float16")):
        found = decode_exported_ct2(run, src, refs, 8, repeats, out, "cuda", compute, i == 0)
        if found is not None:
            systems[f"CTranslate2 {compute}, same weights"] = found
    return {"steps": trained["steps"], "sentences": len(src), "systems": systems}


def markdown(args, tests: str, training: list[dict], decoding: dict) -> str:
    name = torch.cuda.get_device_name(0)
    lines = [
        f"### GPU check, {datetime.date.today()}, {name}, torch {torch.__version__}",
        "",
        f"Command: `python scripts/gpu_check.py {' '.join(sys.argv[1:])}` (`make gpu-check`)",
        "",
        f"- tests marked `cuda`: {tests}",
        "",
        "| training, base shape, bf16 | tokens/s | target tokens/s | MFU | step ms | peak GB |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in training:
        if "error" in r:
            lines.append(f"| failed: {r['error'][-120:]!r} | | | | | |")
            continue
        label = "compiled" if r["compile"] else "eager"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
        gb = (r.get("cuda_peak_mb") or 0) / 1024
        lines.append(
            f"| {label} | {r['tokens_per_s']:,} | {r['target_tokens_per_s']:,} | {mfu} | "
            f"{r['step_ms']} | {gb:.1f} |"
        )
    lines += [
        "",
        f"Decoding {decoding['sentences']} valid sentences, batches of 32, a model trained "
        f"{args.train_minutes:g} min ({decoding['steps']} steps) on this GPU:",
        "",
        "| system | mode | sent/s | tok/s | BLEU |",
        "| --- | --- | --- | --- | --- |",
    ]
    for system, modes in decoding["systems"].items():
        for mode, r in modes.items():
            lines.append(
                f"| {system} | {mode} | {r['sent_s']:.1f} | {r['tok_s']:,.0f} | {r['bleu']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, help="en-fr corpus folder (train/valid .en/.fr[.gz])")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpu-check")))
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu-check-work"), help="scratch")
    p.add_argument("--train-minutes", type=float, default=4.0)
    p.add_argument("--steps", type=int, default=30, help="timed steps of the training bench")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device on this machine (torch {torch.__version__}); skipped")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tests = run_cuda_tests(args.out)
    print(f"cuda tests: {tests}", flush=True)
    training = [bench_training(args.out, c, args.steps) for c in (False, True)]
    print(json.dumps(training), flush=True)
    data = corpus(args.data, args.work)
    decoding = bench_decoding(data, args.work, args.train_minutes, args.repeats)
    block = markdown(args, tests, training, decoding)
    block += f"\n({time.perf_counter() - started:.0f} s in all)\n"
    (args.out / "gpu-check.md").write_text(block)
    print(block)


if __name__ == "__main__":
    main()
