"""Data pipeline at scale: preprocessing speed and memory, and memory while iterating batches.

    python scripts/bench_data.py --pairs 1000000 5000000

For each size: writes a synthetic line-aligned corpus (random words, corpus-like lengths), then
runs two stages, each in its own process so each has its own peak memory:
  prep     corpus → Arrow (datasets) → SentencePiece (sampled) → token ids (datasets.map,
           num_proc) → length filter: pairs/s and peak RSS;
  iterate  one epoch of token-budget batches, collated, as training would see them: batches/s
           and peak RSS.
Peak RSS counts file pages mapped in from the Arrow cache; "anon" is the process's own memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 128
  num_proc: {num_proc}
tokenizer: {{type: unigram, vocab_size: 8000, max_sentences: 300000}}
train: {{max_tokens: 4096}}
"""


def write_corpus(folder: Path, pairs: int, seed: int = 0) -> None:
    """Random-word sentences with log-normal lengths (mean ~12 words), target ~10% longer."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(20000)])
    folder.mkdir(parents=True, exist_ok=True)
    chunk = 200_000
    with open(folder / "train.en", "w") as fs, open(folder / "train.fr", "w") as ft:
        for start in range(0, pairs, chunk):
            n = min(chunk, pairs - start)
            src_len = np.clip(rng.lognormal(2.3, 0.5, n).astype(int), 1, 90)
            tgt_len = np.clip((src_len * rng.normal(1.1, 0.15, n)).astype(int), 1, 100)
            # Zipf-like word choice so SentencePiece sees a realistic frequency spectrum.
            ids = np.minimum(rng.zipf(1.3, src_len.sum() + tgt_len.sum()), len(words)) - 1
            text = words[ids]
            pos = 0
            for s, t in zip(src_len, tgt_len):
                fs.write(" ".join(text[pos : pos + s]) + "\n")
                pos += s
                ft.write(" ".join(text[pos : pos + t]) + "\n")
                pos += t


class _AnonPeak:
    """Samples the process's anonymous (non-file) resident memory in a background thread."""

    def __init__(self, interval: float = 0.05):
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            time.sleep(interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def stage(name: str, config: Path) -> dict:
    """Run one stage in this process and return its figures."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from seq2seq.config import load_config
    from seq2seq.data.batching import epoch_batches, loader
    from seq2seq.data.corpus import lengths, prepare_data

    anon = _AnonPeak()
    cfg = load_config(config)
    start = time.perf_counter()
    if name == "prep":
        data = prepare_data(cfg, reuse_tokenizer=False)
        seconds = time.perf_counter() - start
        out = {
            "pairs": len(data.train),
            "seconds": seconds,
            "pairs_per_s": len(data.train) / seconds,
        }
    else:
        data = prepare_data(cfg, reuse_tokenizer=True)  # cached by the prep stage: loads at once
        load_s = time.perf_counter() - start
        src, tgt = lengths(data.train)
        batches = epoch_batches(src, tgt, max_tokens=cfg.train.max_tokens, seed=1, epoch=0)
        tokens = data.train.select_columns(["src_ids", "tgt_ids"])
        start = time.perf_counter()
        n_tokens = 0
        for batch in loader(tokens, batches):
            n_tokens += batch.ntokens
        seconds = time.perf_counter() - start
        out = {
            "load_seconds": load_s,
            "batches": len(batches),
            "seconds": seconds,
            "batches_per_s": len(batches) / seconds,
            "target_tokens": n_tokens,
        }
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_anon_mb"] = anon.stop()
    out["children_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return out


def run_stage(name: str, config: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--stage", name, "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if proc.returncode != 0:
        sys.exit(f"stage {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 5_000_000])
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    p.add_argument("--stage", choices=["prep", "iterate"], help=argparse.SUPPRESS)
    p.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.stage:
        print(json.dumps(stage(args.stage, args.config)))
        return

    work = args.work or Path(tempfile.mkdtemp(prefix="seq2seq-bench-data-"))
    rows = []
    for n in args.pairs:
        folder = work / f"{n}"
        env = {
            **os.environ,
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(folder / "hf-cache"),
        }
        t = time.perf_counter()
        write_corpus(folder / "data", n)
        print(f"{n:,} pairs: corpus written in {time.perf_counter() - t:.0f} s", flush=True)
        config = folder / "config.yaml"
        config.write_text(
            CONFIG.format(run=folder / "run", data=folder / "data", num_proc=args.num_proc)
        )
        prep = run_stage("prep", config, env)
        print(f"  prep: {prep}", flush=True)
        it = run_stage("iterate", config, env)
        print(f"  iterate: {it}", flush=True)
        rows.append((n, prep, it))

    print(
        f"\n{'pairs':>10} {'prep pairs/s':>13} {'prep RSS':>10} {'(anon)':>8} {'map workers':>12}"
        f" {'iter batches/s':>15} {'iter RSS':>10} {'(anon)':>8}"
    )
    for n, prep, it in rows:
        print(
            f"{n:>10,} {prep['pairs_per_s']:>13,.0f} {prep['peak_rss_mb']:>7,.0f} MB "
            f"{prep['peak_anon_mb']:>5,.0f} MB {prep['children_peak_rss_mb']:>9,.0f} MB "
            f"{it['batches_per_s']:>15,.0f} {it['peak_rss_mb']:>7,.0f} MB "
            f"{it['peak_anon_mb']:>5,.0f} MB"
        )
    (work / "bench_data.json").write_text(json.dumps(rows, indent=2))
    print(f"(details in {work / 'bench_data.json'})")


if __name__ == "__main__":
    main()
