"""Back-translation in a simulated low-resource setting (issue 42 item 4): does en→fr trained on
a small parallel set gain from the French side of the rest, back-translated by beam search, by
sampling, and by sampling with the `<BT>` tag?

    python scripts/bench_backtranslation.py --out /tmp/bt --updates 900

From the enfr train split, a seeded sample of --pairs pairs (20,000) is the parallel data and
--mono French sentences of the others are the monolingual text. Then, all with
configs/enfr-small.yaml's model and schedule, one thread a run, two runs side by side:

1. fr→en on the parallel pairs (the backward model);
2. the monolingual French back-translated with it (int8, as a user would on CPU): beam 4, and
   sampled (`--sampling topk:10 --seed 1`, Edunov et al. 2018);
3. en→fr on the parallel pairs alone, and on parallel + each back-translation as weighted parts
   with mozilla/translations' two stages: mix original 0.6 / BT 0.4, then original alone (a
   quarter of the updates); the third run tags the sampled BT sources (Caswell et al. 2019).

Every en→fr run gets the same number of updates (--updates), not the same minutes: runs side by
side share the cores unevenly, updates do not. Each is scored by `seq2seq evaluate` on the test
half of valid (pairs 500-1000, never used for choosing). Printed: a markdown table.
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO, bench_env  # noqa: E402

from seq2seq.data.corpus import read_lines  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "enfr"
SYSTEMS = {  # name: (back-translation file stem or None, tagged)
    "base": (None, False),
    "beam-bt": ("mono.beam", False),
    "sampled-bt": ("mono.sampled", False),
    "tagged-sampled-bt": ("mono.sampled", True),
}


def split(data: Path, out: Path, pairs: int, mono: int, seed: int) -> None:
    """par.en/par.fr: `pairs` sampled pairs; mono.fr: the French of `mono` of the others."""
    en, fr = read_lines(data / "train.en"), read_lines(data / "train.fr")
    rows = list(range(len(en)))
    random.Random(seed).shuffle(rows)
    chosen, rest = sorted(rows[:pairs]), rows[pairs : pairs + mono]

    def write(name: str, lines: list[str]) -> None:
        (out / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")

    write("par.en", [en[i] for i in chosen])
    write("par.fr", [fr[i] for i in chosen])
    write("mono.fr", [fr[i] for i in rest])


def config(out: Path, name: str, src: str, tgt: str, updates: int, bt: tuple) -> Path:
    """A config for one run: enfr-small's model and schedule on this bench's data."""
    cfg = yaml.safe_load((REPO / "configs" / "enfr-small.yaml").read_text())
    stem, tagged = bt
    cfg["run_dir"] = str(out / name)
    d = cfg["data"]
    d["src_lang"], d["tgt_lang"] = src, tgt
    d["train"] = {"src": str(out / f"par.{src}"), "tgt": str(out / f"par.{tgt}")}
    if stem is not None:
        back = {"name": "bt", "src": str(out / f"{stem}.en"), "tgt": str(out / "mono.fr")}
        back |= {"weight": 0.4} | ({"tag": "bt"} if tagged else {})
        d["train"] = [{"name": "original", "weight": 0.6, **d["train"]}, back]
        finetune = updates // 4
        cfg["train"]["stages"] = [
            {"name": "mix", "mix": {"original": 0.6, "bt": 0.4}, "max_steps": updates - finetune},
            {"name": "finetune", "mix": {"original": 1.0}, "max_steps": finetune},
        ]
    for split_name, extra in (("valid", {"max_pairs": 499}), ("test", {"skip_pairs": 499})):
        d[split_name] = {"src": str(DATA / f"valid.{src}"), "tgt": str(DATA / f"valid.{tgt}")}
        d[split_name] |= extra
    cfg["train"] |= {"max_steps": updates, "max_minutes": 24 * 60, "threads": 1}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def seq2seq(*args: str | Path, log: Path) -> subprocess.Popen:
    """A seq2seq command on one thread, its output in `log`."""
    command = [sys.executable, "-m", "seq2seq", "--quiet", *map(str, args)]
    return subprocess.Popen(
        command, cwd=REPO, env=bench_env(1), stdout=log.open("w"), stderr=subprocess.STDOUT
    )


def side_by_side(*procs: subprocess.Popen) -> None:
    """Wait for every process; exit naming the first that failed."""
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"failed: {' '.join(p.args)} (see its log)")


def bleu(out: Path, name: str) -> tuple[float, float]:
    """BLEU and chrF2 of a run on the test half, by `seq2seq evaluate`."""
    log = out / f"{name}.eval"
    side_by_side(seq2seq("evaluate", "--run", out / name, "--split", "test", log=log))
    text = log.read_text()
    return tuple(float(re.search(rf"^{k} = ([\d.]+)", text, re.M)[1]) for k in ("BLEU", "chrF2"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--mono", type=int, default=20_000)
    parser.add_argument("--updates", type=int, default=900, help="updates of every run")
    parser.add_argument("--sampling", default="topk:10")
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    split(args.data, out, args.pairs, args.mono, args.seed)
    cfgs = {n: config(out, n, "en", "fr", args.updates, bt) for n, bt in SYSTEMS.items()}
    backward = config(out, "fren", "fr", "en", args.updates, (None, False))
    # The backward model beside the base run, which needs no back-translation.
    side_by_side(
        seq2seq("train", "-c", backward, log=out / "fren.log"),
        seq2seq("train", "-c", cfgs["base"], log=out / "base.log"),
    )
    bt = ("translate", "--run", out / "fren", "--quantize", "int8", "--input", out / "mono.fr")
    side_by_side(
        seq2seq(*bt, "--beam-size", "4", "--output", out / "mono.beam.en", log=out / "bt-beam.log"),
        seq2seq(*bt, "--sampling", args.sampling, "--seed", "1",
                "--output", out / "mono.sampled.en", log=out / "bt-sampled.log"),
    )  # fmt: skip
    rest = [n for n in SYSTEMS if n != "base"]
    side_by_side(*(seq2seq("train", "-c", cfgs[n], log=out / f"{n}.log") for n in rest[:2]))
    side_by_side(*(seq2seq("train", "-c", cfgs[n], log=out / f"{n}.log") for n in rest[2:]))
    print(f"{args.pairs:,} parallel pairs, {args.mono:,} back-translated, {args.updates} updates")
    print("| en→fr system | test BLEU | chrF2 |\n|---|---|---|")
    for name in SYSTEMS:
        b, c = bleu(out, name)
        print(f"| {name} | {b:.2f} | {c:.2f} |")
    b, c = bleu(out, "fren")
    print(f"| (fr→en backward model) | {b:.2f} | {c:.2f} |")


if __name__ == "__main__":
    main()
