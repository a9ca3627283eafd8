"""int8 CPU decoding beside float32: seq2seq (`--quantize int8`) and CTranslate2 on the project's
own export (`compute_type="int8"`), same run, same data, as bench_translate.py decodes.

    python scripts/bench_int8.py --run R --data DIR                   # the int8 rows
    python scripts/bench_int8.py --run R --data DIR --batch-sizes 1,8,32,64   # + PNG and JSON

    python scripts/bench_int8.py --run R --memory-only                 # loaded memory only

Rows: target tokens/s, sentences/s, BLEU, the share of outputs identical to the same system's
float32 outputs, and the resident memory of the loaded model (RSS after loading minus before,
each measured in a fresh process so that the float32 and int8 models never share one; "anon"
is the anonymous part of it, the heap and tensors, without the pages of torch's own code that
a first load touches; `--memory-only` also gives the file-backed part, mapped files' pages that
the load made resident, and the files that grew most). "seq2seq int8 export" decodes the run
written by `seq2seq export --format int8` (into OUT/seq2seq-int8-run), loaded without float32
weights.
`bench_translate.py --int8 --project-run R` runs the same rows after its own table;
`--batch-sizes` there runs only the sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

from bench_translate import BEAMS, agreement, decode_exported_ct2, decode_project
from benchlib import REPO

RSS_PROBE = """
import json, sys, torch
torch.set_num_threads(1)
def rss():
    found = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS:", "RssAnon:")):
            found[line.split(":")[0]] = int(line.split()[1]) * 1024
    return found["VmRSS"], found["RssAnon"]
def mapped():
    # Resident bytes per mapped file (code pages of shared libraries, mapped weights).
    found, name = {}, None
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 and parts[5].startswith("/") else None
        elif parts[0] == "Rss:" and name:
            found[name] = found.get(name, 0) + int(parts[1]) * 1024
    return found
kind, path, setting = sys.argv[1:4]
import ctypes, warnings
warnings.filterwarnings("ignore")
# Imports outside the delta (torch.ao's too): only the model counts.
import seq2seq.decode.translator, torch.ao.quantization, torch.ao.nn.quantized.dynamic
if kind == "ct2":
    import ctranslate2
before, files = rss(), mapped()
if kind == "seq2seq":
    from seq2seq.config import run_decode
    # "none" / "int8", or decode settings as JSON
    changes = json.loads(setting) if setting.startswith("{") else {"quantize": setting}
    t = seq2seq.decode.translator.load_translator(
        path, device="cpu", decode=run_decode(path, **changes)
    )
else:
    t = ctranslate2.Translator(path, device="cpu", compute_type=setting, intra_threads=1)
# The float32 weights an int8 load drops go back to the system, as they would in time.
ctypes.CDLL("libc.so.6").malloc_trim(0)
after = rss()
grown = {k: v - files.get(k, 0) for k, v in mapped().items() if v > files.get(k, 0)}
print(json.dumps({"rss": after[0] - before[0], "anon": after[1] - before[1], "files": grown}))
"""


def loaded_rss(kind: str, path: Path, setting: str) -> tuple[int, int]:
    """Bytes of resident memory (all, anonymous) a loaded model adds, in a fresh process."""
    found = loaded_memory(kind, path, setting)
    return found["rss"], found["anon"]


def loaded_memory(kind: str, path: Path, setting: str) -> dict:
    """`loaded_rss`'s two figures and the resident bytes each mapped file gained (`files`)."""
    proc = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, kind, str(path), setting],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"memory probe failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def int8_export(run: Path, out: Path) -> Path:
    """The run written by `seq2seq export --format int8` into OUT (once)."""
    from seq2seq.interop.int8_run import export_int8

    folder = out / "seq2seq-int8-run"
    return folder if folder.is_dir() else export_int8(run, folder)


def memory_rows(run: Path, out: Path) -> dict[str, dict]:
    """Loaded memory (`loaded_memory`) of the float32, int8 and int8-export models."""
    probes = {
        "seq2seq float32": ("seq2seq", run, "none"),
        "seq2seq float32, torch GEMM": ("seq2seq", run, '{"packed_weights": false}'),
        "seq2seq int8": ("seq2seq", run, "int8"),
        "seq2seq int8 export": ("seq2seq", int8_export(run, out), "int8"),
    }
    return {name: loaded_memory(*p) for name, p in probes.items()}


def print_memory(memory: dict[str, dict]) -> None:
    """RSS, anonymous and file-backed MB of each model, and the file that grew most."""
    mb = 2**20
    base = memory["seq2seq float32"]["rss"]
    print(f"{'system':<24} {'RSS MB':>7} {'anon MB':>8} {'file MB':>8} {'RSS / float32':>14}")
    for name, m in memory.items():
        files = sum(m["files"].values())
        print(
            f"{name:<24} {m['rss'] / mb:>7.1f} {m['anon'] / mb:>8.1f} {files / mb:>8.1f} "
            f"{m['rss'] / base:>14.2f}"
        )
    for name, m in memory.items():
        top = sorted(m["files"].items(), key=lambda kv: -kv[1])[:2]
        print(f"  {name}: " + ", ".join(f"{Path(k).name} {v / mb:.1f} MB" for k, v in top))


def int8_rows(run: Path, src: list[str], refs: list[str], *, threads: int, repeats: int, out: Path):
    """seq2seq and CTranslate2 rows, float32 and int8, with agreement and loaded memory."""
    exported = int8_export(run, out)
    timed = partial(decode_project, src=src, refs=refs, threads=threads, repeats=repeats, out=out)
    rows = {
        "seq2seq float32": timed(run, name="s2s-fp32"),
        "seq2seq float32, torch GEMM": timed(
            run, name="s2s-fp32-plain", settings={"packed_weights": False}
        ),
        "seq2seq int8": timed(run, name="s2s-int8", quantize="int8"),
        "seq2seq int8, batch scales": timed(
            run, name="s2s-int8-batch", quantize="int8", settings={"int8_scales": "batch"}
        ),
        "seq2seq int8 export": timed(exported, name="s2s-int8-run", quantize="int8"),
    }
    for compute, export in (("float32", True), ("int8", False)):
        found = decode_exported_ct2(
            run, src, refs, threads, repeats, out, compute_type=compute, export=export,
            name=f"ct2-{compute}",
        )  # fmt: skip
        if found is not None:
            rows[f"ctranslate2 {compute}, seq2seq export"] = found
    ct2 = out / "seq2seq-ct2"
    # name: (file prefix of its outputs, of its float32 twin's, memory probe)
    # The float32 twin is torch's GEMM: the outputs every earlier run called float32.
    fp32, int8, plain = "none", "int8", "s2s-fp32-plain"
    systems = {
        "seq2seq float32": ("s2s-fp32", plain, ("seq2seq", run, fp32)),
        "seq2seq float32, torch GEMM": (
            plain,
            plain,
            ("seq2seq", run, '{"quantize": "none", "packed_weights": false}'),
        ),
        "seq2seq int8": ("s2s-int8", plain, ("seq2seq", run, int8)),
        "seq2seq int8, batch scales": (
            "s2s-int8-batch",
            plain,
            ("seq2seq", run, '{"quantize": "int8", "int8_scales": "batch"}'),
        ),
        "seq2seq int8 export": ("s2s-int8-run", plain, ("seq2seq", exported, int8)),
        "ctranslate2 float32, seq2seq export": (
            "ct2-float32",
            "ct2-float32",
            ("ct2", ct2, "float32"),
        ),
        "ctranslate2 int8, seq2seq export": ("ct2-int8", "ct2-float32", ("ct2", ct2, "int8")),
    }
    for name, modes in rows.items():
        mine, fp32, probe = systems[name]
        rss_mb, anon_mb = (b / 2**20 for b in loaded_rss(*probe))
        for mode, r in modes.items():
            r["identical_to_fp32"] = agreement(
                out / f"{fp32}.{mode}.txt", out / f"{mine}.{mode}.txt"
            )
            r["rss_mb"], r["anon_mb"] = rss_mb, anon_mb
    return rows


def print_rows(rows: dict) -> None:
    """The int8 table: tok/s, sent/s, BLEU, identical to float32, loaded RSS."""
    print(
        f"{'system':<36} {'mode':<7} {'sent/s':>8} {'tok/s':>8} {'BLEU':>6} {'=fp32':>6} {'MB':>6}"
        f" {'anon':>6}"
    )
    for name, modes in rows.items():
        for mode, r in modes.items():
            print(
                f"{name:<36} {mode:<7} {r['sent_s']:>8.1f} {r['tok_s']:>8.0f} {r['bleu']:>6.2f} "
                f"{r['identical_to_fp32']:>6.1%} {r['rss_mb']:>6.1f} {r['anon_mb']:>6.1f}"
            )


def batch_size_sweep(run: Path, src, refs, *, sizes: list[int], threads: int, repeats: int, out):
    """tok/s of seq2seq and CTranslate2, float32 and int8, at each batch size (greedy, beam 4)."""
    sweep: dict = {}
    for size in sizes:
        common = {"beams": BEAMS}
        sweep[size] = {
            "seq2seq float32": decode_project(
                run, src, refs, threads, repeats, out, "sweep", batch=size, **common
            ),
            "seq2seq int8": decode_project(
                run,
                src,
                refs,
                threads,
                repeats,
                out,
                "sweep",
                quantize="int8",
                batch=size,
                **common,
            ),
        }
        for compute in ("float32", "int8"):
            found = decode_exported_ct2(
                run, src, refs, threads, repeats, out, compute_type=compute,
                export=not (out / "seq2seq-ct2" / "model.bin").is_file(), batch_size=size, **common,
            )  # fmt: skip
            if found is not None:
                sweep[size][f"ctranslate2 {compute}"] = found
    return sweep


def plot_sweep(sweep: dict, path: Path) -> Path:
    """Target tokens/s against batch size, one line per system, a panel per search."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(sweep)
    modes = list(next(iter(next(iter(sweep.values())).values())))
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for system in sweep[sizes[0]]:
            ax.plot(
                sizes, [sweep[s][system][mode]["tok_s"] for s in sizes], marker="o", label=system
            )
        ax.set(xscale="log", xlabel="batch size (sentences)", ylabel="target tokens/s", title=mode)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="a trained project run")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="decode only the first N valid lines")
    p.add_argument("--batch-sizes", help="e.g. 1,8,32,64: also sweep batch sizes, PNG + JSON")
    p.add_argument("--memory-only", action="store_true", help="loaded memory only, no decoding")
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-int8"))
    p.add_argument("--figure", type=Path, default=REPO / "benchmarks" / "int8_batch_sizes.png")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.memory_only:
        print_memory(memory_rows(args.run, args.out))
        return
    src = (args.data / "valid.en").read_text(encoding="utf-8").splitlines()
    refs = (args.data / "valid.fr").read_text(encoding="utf-8").splitlines()
    if args.limit:
        src, refs = src[: args.limit], refs[: args.limit]
    common = {"threads": args.threads, "repeats": args.repeats, "out": args.out}
    rows = int8_rows(args.run, src, refs, **common)
    print(f"\n{len(src)} valid sentences, {args.threads} threads, median of {args.repeats}")
    print_rows(rows)
    result: dict = {"int8": rows}
    if args.batch_sizes:
        sizes = [int(x) for x in args.batch_sizes.split(",")]
        result["batch_sizes"] = batch_size_sweep(args.run, src, refs, sizes=sizes, **common)
        print(plot_sweep(result["batch_sizes"], args.figure))
        json_path = args.figure.with_suffix(".json")
        json_path.write_text(json.dumps(result["batch_sizes"], indent=2))
        print(json_path)
    (args.out / "bench_int8.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
