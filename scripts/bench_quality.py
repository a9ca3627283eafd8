"""Translation quality at equal wall-clock compute: seq2seq against the Hugging Face Marian peer.

    python scripts/bench_quality.py --minutes 30          # make bench-quality

One after the other in one run, with the same threads: the project trains with
configs/enfr-small.yaml for M minutes; the peer (../shared/bench/peers/hf_marian_train.py, a
randomly initialised MarianMTModel of the same shape, with its own settings: post-norm, lr 5e-4,
warm-up 1000) trains on the same data with the project's SentencePiece model and the same token
budget per batch for the same M minutes. The corpus's valid file is cut at a document boundary:
its first --dev-pairs pairs are the project's validation data (what chooses its best checkpoint),
the rest is the report set, never used for choosing. Both systems decode the report set with
beam 4 (each with its own decoder defaults) and the outputs are scored by the same sacrebleu
calls: BLEU and chrF with signatures. Checkpoints (project) and snapshots (peer) taken on the way
give a report-set BLEU against minutes curve, written to OUT/bleu_vs_minutes.png.
Results: OUT/results.json and a Markdown table in OUT/results.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    PEER_PY,
    PEERS,
    REPO,
    bench_env,
    require_peers,
    run_measured,
    train_peer,
)

# The peer's fixed shape (hf_marian_train.build_model); the config must match it.
PEER_SHAPE = {
    "d_model": 256,
    "heads": 4,
    "encoder_layers": 3,
    "decoder_layers": 3,
    "ffn_dim": 1024,
    "dropout": 0.1,
    "tie_embeddings": True,
}


def score(hyps: list[str], refs: list[str]) -> dict:
    """Corpus BLEU and chrF of detokenised text, with sacrebleu's signatures."""
    import sacrebleu

    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        # under-translation shows here first (issue 17): hypothesis / reference length
        "length_ratio": round(b.sys_len / max(b.ref_len, 1), 3),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def split_valid(data: Path, dev_pairs: int, out: Path) -> dict[str, tuple[Path, Path]]:
    """The valid file cut in two: `dev` (its first `dev_pairs` pairs, for choosing) and `report`
    (the rest, for reporting), as (source, reference) files under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    parts = {"dev": slice(0, dev_pairs), "report": slice(dev_pairs, None)}
    files = {}
    for name, part in parts.items():
        for lang in ("en", "fr"):
            lines = read_lines(data / f"valid.{lang}")[part]
            (out / f"{name}.{lang}").write_text("".join(x + "\n" for x in lines), "utf-8")
        files[name] = (out / f"{name}.en", out / f"{name}.fr")
    return files


def project_overrides(
    data: Path, run: Path, minutes: float, threads: int, save_every: int | None, dev_pairs: int
) -> list:
    """The run's data, budget and threads; every checkpoint kept (`save_every` None: the
    config's spacing, which its checkpoint averaging assumes)."""
    spacing = [] if save_every is None else [f"train.save_every={save_every}"]
    return [
        *spacing,
        f"run_dir={run}",
        f"data.train.src={data}/train.en",
        f"data.train.tgt={data}/train.fr",
        f"data.valid.src={data}/valid.en",
        f"data.valid.tgt={data}/valid.fr",
        f"data.valid.max_pairs={dev_pairs}",  # chooses the best checkpoint; never reported
        f"train.max_minutes={minutes}",
        f"train.threads={threads}",
        "train.device=cpu",
        "train.log_every=1",  # every step's tokens and time: exact totals and checkpoint minutes
        "train.keep_last=100000",  # every checkpoint stays for the curve
    ]


def train_with_config(config: Path, sets: list[str], env: dict, log: Path) -> dict:
    """Train with `config` and the overrides; return steps, tokens and checkpoint minutes."""
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "train", "--config", str(config)]
    for item in sets:
        cmd += ["--set", item]
    code, wall, rss = run_measured(cmd, env, log)
    if code != 0:
        sys.exit(f"project training failed (exit {code}); see {log}")
    run = Path(next(s for s in sets if s.startswith("run_dir=")).partition("=")[2])
    return {"wall_s": wall, "peak_rss_mb": rss, **training_record(run)}


def training_record(run: Path) -> dict:
    """Steps, target tokens and the minute each step ended at, from a run's metrics log."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    start = next(r["time"] for r in records if r.get("split") == "data")
    train = [r for r in records if r.get("split") == "train"]
    return {
        "steps": train[-1]["step"],
        "tokens": int(sum(r["tokens"] for r in train)),
        "train_minutes": (train[-1]["time"] - start) / 60,
        "minute_of_step": {r["step"]: (r["time"] - start) / 60 for r in train},
    }


def evaluate_project(
    run: Path,
    test: tuple[Path, Path],
    out: Path,
    env: dict,
    checkpoint: Path | None = None,
    beam: int = 4,
    length_penalty: float | None = None,
) -> dict:
    """Decode a test set (source, reference files) with `seq2seq evaluate`; score it."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "evaluate", "--run", str(run)]
    cmd += ["--src", str(test[0]), "--ref", str(test[1])]
    cmd += ["--beam-size", str(beam), "--device", "cpu", "--output-dir", str(out)]
    cmd += ["--json", str(out / "report.json")]
    if checkpoint is not None:
        cmd += ["--checkpoint", str(checkpoint)]
    if length_penalty is not None:
        cmd += ["--length-penalty", str(length_penalty)]
    code, wall, _ = run_measured(cmd, env, out / "evaluate.log")
    if code != 0:
        sys.exit(f"seq2seq evaluate failed (exit {code}); see {out / 'evaluate.log'}")
    report = json.loads((out / "report.json").read_text())
    hyps = read_lines(Path(report["hypotheses_file"]))
    return {
        **score(hyps, read_lines(test[1])),
        "checkpoint": report.get("checkpoint"),
        "decode_s": wall,
    }


def evaluate_peer(model: Path, spm: Path, test: tuple[Path, Path], out: Path, env: dict) -> dict:
    """Decode a test set with the peer's own script (beam 4); score its hypotheses."""
    cmd = [str(PEER_PY), str(PEERS / "hf_marian_translate.py"), "--model", str(model)]
    cmd += ["--spm", str(spm), "--src", str(test[0]), "--ref", str(test[1])]
    cmd += ["--out", str(out), "--beams", "4"]
    out.mkdir(parents=True, exist_ok=True)
    code, wall, _ = run_measured(cmd, env, out / "translate.log")
    if code != 0:
        sys.exit(f"peer decoding failed (exit {code}); see {out / 'translate.log'}")
    hyps = read_lines(out / "hyp.beam4.txt")
    return {**score(hyps, read_lines(test[1])), "decode_s": wall}


def plot(curves: dict[str, list[tuple[float, float]]], minutes: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for name, points in curves.items():
        ax.plot([m for m, _ in points], [b for _, b in points], "o-", label=name, ms=4)
    ax.set(
        title=f"report-set BLEU (beam 4) against training minutes, 2 CPU threads, "
        f"{minutes:g} min each",
        xlabel="training minutes",
        ylabel="BLEU",
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="training budget of each system")
    p.add_argument("--config", type=Path, default=REPO / "configs" / "enfr-small.yaml")
    p.add_argument("--set", action="append", default=[], help="extra config override")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--points", type=int, default=6, help="curve points before the final one")
    p.add_argument(
        "--dev-pairs",
        type=int,
        default=499,
        help="valid pairs that choose checkpoints (the rest are reported); 499 ends a document",
    )
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-quality"))
    args = p.parse_args()
    require_peers()
    sys.path.insert(0, str(REPO))
    from seq2seq.config import load_config

    data = args.data.resolve()
    cfg = load_config(args.config, args.set)
    shape = {k: getattr(cfg.model, k) for k in PEER_SHAPE}
    if shape != PEER_SHAPE or cfg.tokenizer.vocab_size != 8000 or not cfg.tokenizer.joint:
        sys.exit(f"the config's shape {shape} (vocab {cfg.tokenizer.vocab_size}) is not the peer's")
    args.out.mkdir(parents=True, exist_ok=True)
    env = bench_env(args.threads)
    seconds = args.minutes * 60
    run = args.out / "project"

    print(f"training seq2seq for {args.minutes:g} min ...", flush=True)
    overrides = project_overrides(data, run, args.minutes, args.threads, None, args.dev_pairs)
    sets = [*args.set, *overrides]
    report = split_valid(data, args.dev_pairs, args.out / "valid-parts")["report"]
    ours = train_with_config(args.config, sets, env, args.out / "project.log")
    spm = run / "tokenizer" / "spm.model"
    print(f"training the peer for {args.minutes:g} min ...", flush=True)
    peer = train_peer(
        data,
        spm,
        args.out,
        seconds,
        env,
        max_tokens=cfg.train.max_tokens,
        snapshot_every=seconds / args.points,
    )

    print("decoding the report set with beam 4 ...", flush=True)
    ours["final"] = evaluate_project(run, report, args.out / "eval" / "project", env)
    peer["final"] = evaluate_peer(Path(peer["model"]), spm, report, args.out / "eval" / "peer", env)
    curves: dict[str, list[tuple[float, float]]] = {"seq2seq": [], "hf-marian (peer)": []}
    from seq2seq.run.checkpoint import list_checkpoints

    saved = list_checkpoints(run)
    # The config's checkpoints are dense (it averages the last ones): the curve takes `points`.
    for ckpt in [saved[round(i * (len(saved) - 1) / args.points)] for i in range(args.points + 1)]:
        minute = ours["minute_of_step"][ckpt.step]
        r = evaluate_project(
            run, report, args.out / "eval" / f"project-{ckpt.step}", env, ckpt.weights
        )
        curves["seq2seq"].append((minute, r["bleu"]))
        print(
            f"  seq2seq step {ckpt.step} ({minute:.1f} min, {ckpt.step / max(minute, 1e-9):.0f} "
            f"steps/min): BLEU {r['bleu']}",
            flush=True,
        )
    for snap in peer["snapshots"]:
        if snap["step"] >= peer["steps"]:
            continue  # the final model, decoded above
        folder = Path(snap["dir"])
        r = evaluate_peer(folder, spm, report, args.out / "eval" / f"peer-{folder.name}", env)
        curves["hf-marian (peer)"].append((snap["seconds"] / 60, r["bleu"]))
        print(
            f"  peer step {snap['step']} ({snap['seconds'] / 60:.1f} min): BLEU {r['bleu']}",
            flush=True,
        )
    curves["hf-marian (peer)"].append((peer["train_minutes"], peer["final"]["bleu"]))
    png = args.out / "bleu_vs_minutes.png"
    plot(curves, args.minutes, png)

    del ours["minute_of_step"]
    results = {
        "minutes": args.minutes,
        "config": str(args.config),
        "sets": args.set,
        "threads": args.threads,
        "dev_pairs": args.dev_pairs,
        "seq2seq": ours,
        "peer": peer,
        "curves": curves,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = [
        # Steps per minute beside BLEU: a slower machine shows fewer steps, not a worse recipe.
        "| system | steps | steps/min | target tokens seen | train min | report-set BLEU "
        "| report-set chrF | length ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in (("seq2seq", ours), ("hf-marian (peer)", peer)):
        f = r["final"]
        rows.append(
            f"| {name} | {r['steps']:,} | {r['steps'] / r['train_minutes']:.1f} | "
            f"{r['tokens']:,} | {r['train_minutes']:.1f} | "
            f"{f['bleu']:.2f} | {f['chrf']:.2f} | {f['length_ratio']:.3f} |"
        )
    delta = ours["final"]["bleu"] - peer["final"]["bleu"]
    rows += [
        "",
        f"BLEU difference: {delta:+.2f} (target: ≥ +1.0)",
        f"BLEU: {ours['final']['bleu_signature']}",
        f"chrF: {ours['final']['chrf_signature']}",
        f"seq2seq decoded {ours['final']['checkpoint']}",
        f"curve: {png}",
    ]
    table = "\n".join(rows)
    (args.out / "results.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
