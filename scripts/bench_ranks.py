"""Memory per rank: 1, 2 and 4 training processes under torchrun on one machine, one corpus.

    python scripts/bench_ranks.py                      # ../shared/data/enfr, 1/2/4 ranks
    python scripts/bench_ranks.py --pairs 1000000      # a synthetic corpus of 1M pairs instead

The corpus is prepared once (tokenizer, tokenized Arrow cache) in a template run; each world
size then trains a copy of it (the tokenizer is reused, the cache hit) for --steps updates with
`python -m seq2seq.launch --standalone --nproc-per-node N`, while every worker's memory is
sampled from /proc: RSS and PSS (`smaps_rollup`; PSS divides each shared page among the
processes that map it, so the PSS of the ranks add up to what the group really holds) and the
resident part of the Arrow cache files each rank maps (`smaps`). The ranks are the agent's worker
children; `seq2seq.launch` forks them from an agent that has imported torch and the trainer
(`--start-method spawn` measures separately started workers instead: pass it with --spawn).

Reported per world size: per-rank peak RSS and PSS, the sum of the ranks' peak RSS (what a
naive `top` total says: shared pages counted once per process), the peak of the ranks' summed
PSS, and the corpus mapped per rank. Target (issue 15): the 4 ranks together hold < 2.5× what
one rank holds: the corpus is mapped once per machine, not copied per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  max_len: 128
tokenizer: {{type: unigram, vocab_size: 8000, max_sentences: 300000}}
model: {{d_model: 256, heads: 4, encoder_layers: 3, decoder_layers: 3, ffn_dim: 1024,
        norm_first: true, max_positions: 256}}
train: {{max_tokens: 2048, max_steps: {steps}, warmup_steps: 100, log_every: 10,
        eval_every: 100000, save_every: 100000, threads: 1}}
"""


def _kb(fields: dict[str, int], *names: str) -> float:
    return sum(fields.get(n, 0) for n in names) / 1024


def rollup(pid: int) -> dict[str, float] | None:
    """RSS, PSS and private memory of a process in MB (None once it has gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[-1] == "kB":
            fields[name] = int(parts[0])
    return {
        "rss": _kb(fields, "Rss"),
        "pss": _kb(fields, "Pss"),
        "private": _kb(fields, "Private_Clean", "Private_Dirty"),
    }


def mapped(pid: int, folder: str) -> dict[str, float]:
    """Resident MB (RSS and PSS) of the files under `folder` that a process maps."""
    rss = pss = 0
    inside = False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                    inside = len(head) >= 6 and head[5].startswith(folder)
                elif inside and head[0] == "Rss:":
                    rss += int(head[1])
                elif inside and head[0] == "Pss:":
                    pss += int(head[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return {"rss": rss / 1024, "pss": pss / 1024}


def workers_of(agent: int) -> list[int]:
    """The agent's worker processes, in start order (= local rank): its direct children that
    run its own command (forked) or `seq2seq train` (spawned), not its helper processes."""
    mine = _cmdline(agent)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid != agent:
            continue
        command = _cmdline(int(entry.name))
        if command == mine or b"seq2seq\0train" in command:
            found.append(int(entry.name))
    return sorted(found)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


class Sampler:
    """Peak memory of each rank, and of the ranks together, sampled in a thread."""

    def __init__(self, agent: int, cache: str, interval: float = 0.25):
        self.agent, self.cache = agent, cache
        self.rank_peak: dict[int, dict[str, float]] = {}
        self.total_pss = self.total_rss = self.agent_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        pids: dict[int, int] = {}
        while not self._stop.is_set():
            for pid in workers_of(self.agent):
                if pid not in pids.values():
                    pids[len(pids)] = pid  # a restarted worker would count as a new rank
            total_pss = total_rss = 0.0
            for rank, pid in pids.items():
                now = rollup(pid)
                if now is None:
                    continue
                now.update({f"corpus_{k}": v for k, v in mapped(pid, self.cache).items()})
                peak = self.rank_peak.setdefault(rank, {})
                for key, value in now.items():
                    peak[key] = max(peak.get(key, 0.0), value)
                total_pss += now["pss"]
                total_rss += now["rss"]
            agent = rollup(self.agent)
            if agent is not None:
                self.agent_pss = max(self.agent_pss, agent["pss"])
                total_pss += agent["pss"]  # forked workers share its pages: count them once
            self.total_pss = max(self.total_pss, total_pss)
            self.total_rss = max(self.total_rss, total_rss)
            time.sleep(interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def env_for(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache),
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "OMP_NUM_THREADS": "1",
    }


def prepare_template(config: Path, cache: Path) -> None:
    """Train the tokenizer and fill the Arrow cache once, outside any measurement."""
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq", "train", "-c", str(config), "--set", "train.max_steps=1"],
        cwd=REPO,
        env=env_for(cache),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"preparing the corpus failed:\n{proc.stderr[-3000:]}")


def measure(
    ranks: int, template: Path, work: Path, cache: Path, data: Path, steps: int, spawn: bool
) -> dict:
    run = work / f"run{ranks}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for name in ("config.yaml", "tokenizer"):  # same tokenizer settings and data: reused
        src = template / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, run / name)
    config = work / f"ranks{ranks}.yaml"
    config.write_text(CONFIG.format(run=run, data=data, steps=steps))
    start = time.perf_counter()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seq2seq.launch",
            "--standalone",
            f"--nproc-per-node={ranks}",
            *(["--start-method=spawn"] if spawn else []),
            "-m",
            "seq2seq",
            "train",
            "-c",
            str(config),
        ],
        cwd=REPO,
        env=env_for(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = Sampler(agent.pid, str(cache))
    _, stderr = agent.communicate()
    seconds = time.perf_counter() - start
    sampler.stop()
    if agent.returncode != 0:
        sys.exit(f"{ranks} ranks failed:\n{stderr[-3000:]}")
    per_rank = [sampler.rank_peak[r] for r in sorted(sampler.rank_peak)]
    return {
        "ranks": ranks,
        "seconds": seconds,
        "per_rank": per_rank,
        "sum_of_rank_peak_rss_mb": sum(r["rss"] for r in per_rank),
        "peak_total_rss_mb": sampler.total_rss,
        "peak_agent_pss_mb": sampler.agent_pss,
        "peak_total_pss_mb": sampler.total_pss,  # agent + ranks
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    ap.add_argument("--pairs", type=int, help="a synthetic corpus of this many pairs instead")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    ap.add_argument(
        "--spawn", action="store_true", help="workers started afresh, not forked from the agent"
    )
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    data = args.data
    if args.pairs:
        from bench_data import write_corpus

        data = work / "corpus"
        if not (data / "train.fr").is_file():
            write_corpus(data, args.pairs)
    elif not (data / "train.en").is_file():
        sys.exit(f"no corpus at {data} (pass --data DIR or --pairs N)")
    cache = work / "hf-cache"
    template = work / "template"
    config = work / "template.yaml"
    config.write_text(CONFIG.format(run=template, data=data, steps=1))
    if not (template / "tokenizer").is_dir():
        prepare_template(config, cache)
    cache_mb = sum(p.stat().st_size for p in cache.rglob("*.arrow")) / 2**20

    rows = [measure(n, template, work, cache, data, args.steps, args.spawn) for n in args.ranks]
    one = rows[0]["peak_total_pss_mb"] if rows[0]["ranks"] == 1 else None
    how = "started afresh (spawn)" if args.spawn else "forked from the agent"
    print(
        f"\ncorpus: {data} (Arrow cache {cache_mb:,.0f} MB); {args.steps} updates a run; "
        f"workers {how}; ΣPSS counts the agent too"
    )
    print(
        f"{'ranks':>5} {'RSS/rank':>9} {'PSS/rank':>9} {'corpus RSS/rank':>16} "
        f"{'corpus PSS/rank':>16} {'ΣRSS':>8} {'agent PSS':>9} {'ΣPSS':>8} {'ΣPSS/1 rank':>12}"
    )
    for row in rows:
        per = row["per_rank"]
        mean = {k: sum(r[k] for r in per) / len(per) for k in per[0]}
        ratio = f"{row['peak_total_pss_mb'] / one:.2f}×" if one else "–"
        row["total_pss_vs_one_rank"] = row["peak_total_pss_mb"] / one if one else None
        print(
            f"{row['ranks']:>5} {mean['rss']:>9.0f} {mean['pss']:>9.0f} "
            f"{mean['corpus_rss']:>16.1f} {mean['corpus_pss']:>16.1f} "
            f"{row['sum_of_rank_peak_rss_mb']:>8.0f} {row['peak_agent_pss_mb']:>9.0f} "
            f"{row['peak_total_pss_mb']:>8.0f} "
            f"{ratio:>12}"
        )
    (work / "bench_ranks.json").write_text(
        json.dumps({"corpus": str(data), "cache_mb": cache_mb, "rows": rows}, indent=2)
    )
    print(f"(MB; figures in {work / 'bench_ranks.json'})")


if __name__ == "__main__":
    main()
