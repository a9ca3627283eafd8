"""Where decoding time goes: one profiled pass of `translate` over valid lines, its operators'
own time grouped (GEMM, attention, cache reorder and growth, top-k, layer norm, other
operators) and the host-side rest (Python and dispatch between operators: wall time minus
every operator's own time), with the CPU's model and flags.

    python scripts/profile_decode.py --run R --data ../shared/data/enfr --beam 4 --threads 2

`--counts` measures no time: operator calls, tensor allocations and bytes allocated per decoder
step (what a step costs the host whatever the machine's load), e.g. to compare two checkouts:

    PYTHONPATH=OTHER_CHECKOUT python scripts/profile_decode.py --run R --counts

Issue 44 item 1: the breakdown measured before anything is changed, on each kind of CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from collections import defaultdict
from pathlib import Path

# Operator name → group; the first pattern contained in the name wins.
GROUPS = (
    ("attention", ("scaled_dot_product", "flash_attention", "softmax")),
    ("gemm", ("addmm", "aten::mm", "aten::bmm", "linear", "matmul", "fbgemm", "quantized")),
    ("cache reorder / growth", ("index_select", "aten::cat", "gather", "index")),
    ("top-k / sort", ("topk", "sort")),
    ("layer norm", ("layer_norm",)),
)
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def cpu_line() -> str:
    """`lscpu`'s model name and which of the instruction sets that matter it has."""
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    have = " ".join(f"{f}{'+' if f in flags else '-'}" for f in FLAGS)
    return f"{fields.get('Model name', '?').strip()}; {have}"


def group_of(name: str) -> str:
    """The group an operator's time counts in."""
    for group, patterns in GROUPS:
        if any(p in name for p in patterns):
            return group
    return "other operators"


def profile(
    run: Path, lines: list[str], beam: int, threads: int, quantize: str, packed: bool = True
) -> dict:
    """Milliseconds per group for one pass of `lines`, after one unprofiled warm-up pass."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    torch.set_num_threads(threads)
    decode = run_decode(
        run, beam_size=beam, batch_size=32, quantize=quantize, packed_weights=packed
    )
    translator, _ = load_translator(run, device="cpu", decode=decode)
    translator.translate(lines[:64])  # warm-up: allocator, kernels
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        translator.translate(lines)
        wall_ms = (time.perf_counter() - start) * 1e3
    groups: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        groups[group_of(event.key)] += event.self_cpu_time_total / 1e3
    ops_ms = sum(groups.values())
    groups["host side (Python, dispatch)"] = max(wall_ms - ops_ms, 0.0)
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return {
        "wall_ms": wall_ms,
        "sent_s": len(lines) / (wall_ms / 1e3),
        "groups_ms": dict(groups),
        "top_ops_ms": {e.key: e.self_cpu_time_total / 1e3 for e in top},
    }


def count(run: Path, lines: list[str], beam: int, quantize: str) -> dict:
    """Operator calls (outermost, and all), allocations and allocated MB per decoder step for
    one pass of `lines`, after a warm-up pass: independent of the machine's load."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    decode = run_decode(run, beam_size=beam, batch_size=32, quantize=quantize)
    translator, _ = load_translator(run, device="cpu", decode=decode)
    translator.translate(lines[:64])
    model, steps = translator.model, [0]
    step = model.decode_step
    model.decode_step = lambda *a, **k: steps.__setitem__(0, steps[0] + 1) or step(*a, **k)
    with torch_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        translator.translate(lines)
    events = [e for e in prof.events() if e.name != "[memory]"]
    # An operator that leaves memory allocated made its output (or a buffer) anew.
    kept = [e.self_cpu_memory_usage for e in events if e.self_cpu_memory_usage > 0]
    per = max(steps[0], 1)
    return {
        "decoder_steps": steps[0],
        "ops_per_step": len([e for e in events if e.cpu_parent is None]) / per,
        "all_ops_per_step": len(events) / per,
        "allocating_ops_per_step": len(kept) / per,
        "allocated_mb_per_step": sum(kept) / per / 2**20,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--data", type=Path, default=Path("../shared/data/enfr"))
    p.add_argument("--lines", type=int, default=300)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quantize", default="none")
    p.add_argument("--torch-gemm", action="store_true", help="float32 without packed weights")
    p.add_argument("--json", type=Path)
    p.add_argument("--counts", action="store_true", help="operator and allocation counts only")
    args = p.parse_args()
    lines = (args.data / "valid.en").read_text("utf-8").splitlines()[: args.lines]
    if args.counts:
        counts = count(args.run, lines, args.beam, args.quantize)
        print(
            f"{len(lines)} lines, beam {args.beam}, {args.quantize}: "
            + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in counts.items()
            )
        )
        return
    result = profile(
        args.run, lines, args.beam, args.threads, args.quantize, packed=not args.torch_gemm
    )
    result["cpu"] = cpu_line()
    result["settings"] = {k: str(v) for k, v in vars(args).items()}
    print(f"CPU: {result['cpu']}")
    print(f"{len(lines)} lines, beam {args.beam}, {args.threads} threads, {args.quantize}: "
          f"{result['wall_ms']:.0f} ms ({result['sent_s']:.1f} sent/s; profiler on)")  # fmt: skip
    for group, ms in sorted(result["groups_ms"].items(), key=lambda kv: -kv[1]):
        print(f"  {group:<32} {ms:>9.1f} ms  {ms / result['wall_ms']:>6.1%}")
    print("  top operators (own time):")
    for name, ms in result["top_ops_ms"].items():
        print(f"    {name:<50} {ms:>9.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
