"""The CPU's measured limit, and how close training and decoding get to it (MFU on CPU).

    python scripts/bench_peak.py --run R                 # peaks, training step, greedy decoding
    python scripts/bench_peak.py --run R --threads 1     # one core only

For each thread count (1 and 2 by default), three figures, each measured here, in one process
per thread count (torch's pools are sized once):

- **float32 GEMM peak**: the best of `torch.mm` on square matrices (1,024 to 3,072) and on the
  shapes the small model multiplies, in GFLOP/s (2 FLOPs a multiply-add). It is what MKL/oneDNN
  reach on this machine, not the datasheet figure: a share of it says how much more the same
  kernels could give.
- **int8 peak** (u8·s8 → s32): fbgemm's quantized linear on a packed weight (what the project's
  int8 layers call), in GOP/s; the CPU flags say whether VNNI is there.
- **training MFU**: the trainer's own step (`scripts/bench_gpu.py` on the CPU: TranslationLoss
  with the fused output layer, Adam, clipping) of the small shape (`configs/enfr-small.yaml`, or
  the run's config) on 4,096-token synthetic batches, model FLOPs from `model/flops.py`, over the
  measured float32 peak.
- **decoding MFU**: greedy translation of the run's first --lines valid sources (the run's own
  Translator, packed weights as `translate` loads them); model FLOPs are the forward third of
  `training_flops` on the source and output lengths (each output token passes the decoder once;
  the KV cache means no re-computation), over the measured float32 peak.

The CPU's model name and flags (lscpu) are printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# One thread count per process: torch sizes its pools once.
MEASURE = r"""
import json, sys, time
from pathlib import Path
import torch

threads, run, lines = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)


def best_rate(fn, flops: float, seconds: float = 1.5) -> float:
    fn()
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        best = max(best, flops / (time.perf_counter() - t))
    return best


torch.manual_seed(0)
shapes = [(n, n, n) for n in (1024, 2048, 3072)] + [(4096, 256, 1024), (4096, 1024, 256),
                                                    (4096, 256, 8000)]
fp32 = {}
for m, k, n in shapes:
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    fp32[f"{m}x{k}x{n}"] = best_rate(lambda: torch.mm(a, b, out=out), 2.0 * m * k * n)
int8 = {}
for m, k, n in [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 256, 1024)]:
    w = torch.quantize_per_tensor(torch.randn(n, k), 0.05, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(w, None)
    x = torch.quantize_per_tensor(torch.rand(m, k), 0.01, 0, torch.quint8)
    run_int8 = lambda: torch.ops.quantized.linear(x, packed, 1.0, 0)  # noqa: E731
    int8[f"{m}x{k}x{n}"] = best_rate(run_int8, 2.0 * m * k * n)
result = {"threads": threads, "fp32_gflops": {k: v / 1e9 for k, v in fp32.items()},
          "int8_gops": {k: v / 1e9 for k, v in int8.items()}}
peak = max(fp32.values())

if run:
    from seq2seq.decode.translator import load_translator
    from seq2seq.model.flops import inference_flops
    translator, _ = load_translator(Path(run), device="cpu")
    src = Path(sys.argv[4]).read_text(encoding="utf-8").splitlines()[:lines]
    translator.translate(src[:16])  # allocator and kernels warm
    t = time.perf_counter()
    out = translator.translate(src)
    seconds = time.perf_counter() - t
    tok = translator.tokenizer
    src_lens = [len(x) for x in tok.encode_src(src)]
    out_lens = [len(x) + 1 for x in tok.encode_tgt(out)]  # + the end-of-sentence step
    cfg, vocab = translator.model.cfg, translator.model.tgt_embed.num_embeddings
    flops = inference_flops(cfg, vocab, src_lens, out_lens)
    result["decode"] = {"lines": len(src), "seconds": seconds, "sent_s": len(src) / seconds,
                        "gflops": flops / seconds / 1e9, "mfu": flops / seconds / peak}
print(json.dumps(result))
"""


def cpu_kind() -> dict:
    """The CPU's model name, and the flags that decide its GEMM kernels."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = info.get("Flags", "").split()
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")
    return {
        "model": info.get("Model name", "?").strip(),
        "flags": [f for f in wanted if f in flags],
        "vnni": any(f in flags for f in ("avx512_vnni", "avx_vnni")),
    }


def measure(threads: int, run: Path | None, lines: int, src: Path) -> dict:
    """The peaks (and decoding, with a run) in a fresh process of `threads` threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-c", MEASURE, str(threads), str(run or ""), str(lines), str(src)]
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"measuring at {threads} thread(s) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def training(threads: int, config: Path, peak_gflops: float, out: Path) -> dict:
    """bench_gpu.py's trainer step on the CPU at `threads`, MFU over the measured peak."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    figures = out / f"train-{threads}.json"
    cmd = [sys.executable, str(REPO / "scripts" / "bench_gpu.py"), "--device", "cpu"]
    cmd += ["--config", str(config), "--precision", "fp32", "--max-tokens", "4096"]
    cmd += ["--steps", "12", "--warmup", "3", "--peak-tflops", str(peak_gflops / 1000)]
    cmd += ["--json", str(figures)]
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the training step at {threads} thread(s) failed:\n{done.stderr[-3000:]}")
    return json.loads(figures.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, help="a trained run to decode with (decoding MFU)")
    p.add_argument("--config", type=Path, default=REPO / "configs" / "enfr-small.yaml")
    p.add_argument("--src", type=Path, default=SHARED / "data" / "enfr" / "valid.en")
    p.add_argument("--lines", type=int, default=300, help="valid lines decoded greedily")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-peak"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kind = cpu_kind()
    print(f"CPU: {kind['model']}; flags: {' '.join(kind['flags'])}; VNNI: {kind['vnni']}")
    rows = []
    for threads in args.threads:
        row = measure(threads, args.run, args.lines, args.src)
        peak = max(row["fp32_gflops"].values())
        row["train"] = training(threads, args.config, peak, args.out)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| threads | fp32 GEMM peak GFLOP/s (shape) | int8 peak GOP/s (shape) | "
        "train step ms | train model GFLOP/s | train MFU | greedy sent/s | decode GFLOP/s "
        "| decode MFU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f32 = max(r["fp32_gflops"].items(), key=lambda kv: kv[1])
        i8 = max(r["int8_gops"].items(), key=lambda kv: kv[1])
        t, d = r["train"], r.get("decode")
        decode = f"{d['sent_s']:.1f} | {d['gflops']:.1f} | {d['mfu']:.1%}" if d else "– | – | –"
        print(
            f"| {r['threads']} | {f32[1]:.0f} ({f32[0]}) | {i8[1]:.0f} ({i8[0]}) | "
            f"{t['step_ms']:.0f} | {t['model_tflops_per_s'] * 1000:.1f} | {t['mfu']:.1%} | "
            f"{decode} |"
        )
    (args.out / "peak.json").write_text(json.dumps({"cpu": kind, "rows": rows}, indent=2))
    print(f"\nfigures in {args.out / 'peak.json'}")


if __name__ == "__main__":
    main()
