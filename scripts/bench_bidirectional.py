"""One model for en↔fr beside two single-direction models (issue 29): BLEU of each direction
and how many outputs come out in the wrong language.

Train the three runs first (30 minutes each, one after the other on an idle machine):

    seq2seq train -c configs/enfr-bidir.yaml --set run_dir=RUNS/bidir
    seq2seq train -c configs/enfr-small.yaml --set run_dir=RUNS/enfr
    seq2seq train -c configs/enfr-small.yaml --set run_dir=RUNS/fren --set data.src_lang=fr \\
        --set data.tgt_lang=en  (and every data.*.src/tgt swapped)

then `python scripts/bench_bidirectional.py --bidir RUNS/bidir --enfr RUNS/enfr --fren RUNS/fren`
(several single runs, e.g. seeds, may follow `--enfr` or `--fren`; a direction without one is
reported for the bidirectional model alone). Each direction is decoded on the whole valid split
(beam 4, each run's own decode settings) by `seq2seq evaluate`; a report already in `--out` from
an earlier call is read again rather than decoded twice. The language of every output is told
by langid.py (`pip install -e .[bench]`), restricted to English and French; its error floor is
the same count on the references.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

DIRECTIONS = {"en-fr": ("en", "fr"), "fr-en": ("fr", "en")}


def wrong_language(texts: list[str], expected: str) -> tuple[int, list[int]]:
    """How many non-empty texts langid (en/fr only) does not call `expected`, and which."""
    import langid

    identifier = langid.langid.LanguageIdentifier.from_modelstring(
        langid.langid.model, norm_probs=True
    )
    identifier.set_languages(["en", "fr"])
    wrong = [i for i, t in enumerate(texts) if t.strip() and identifier.classify(t)[0] != expected]
    return len(wrong), wrong


def evaluate(run: Path, direction: str, data: Path, out: Path, threads: int) -> dict:
    """`seq2seq evaluate` of one direction on the whole valid split; its JSON report."""
    src, tgt = DIRECTIONS[direction]
    report = out / f"{run.name}.{direction}.json"
    if report.is_file():
        return json.loads(report.read_text("utf-8"))
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "evaluate", "--run", str(run)]
    cmd += ["--src", str(data / f"valid.{src}"), "--ref", str(data / f"valid.{tgt}")]
    cmd += ["--src-lang", src, "--tgt-lang", tgt, "--device", "cpu", "--json", str(report)]
    cmd += ["--output-dir", str(out / f"{run.name}.{direction}")]
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return json.loads(report.read_text("utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bidir", type=Path, required=True, help="the run trained on both")
    ap.add_argument("--enfr", type=Path, nargs="*", default=[], help="en→fr runs (seeds)")
    ap.add_argument("--fren", type=Path, nargs="*", default=[], help="fr→en runs (seeds)")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/enfr"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/bidirectional"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for direction, singles in (("en-fr", args.enfr), ("fr-en", args.fren)):
        tgt = DIRECTIONS[direction][1]
        refs = (args.data / f"valid.{tgt}").read_text("utf-8").splitlines()
        floor, _ = wrong_language(refs, tgt)
        for system, run in [("bidirectional", args.bidir)] + [("single", r) for r in singles]:
            report = evaluate(run, direction, args.data, args.out, args.threads)
            hyps = Path(report["hypotheses_file"]).read_text("utf-8").splitlines()
            wrong, which = wrong_language(hyps, tgt)
            rows.append(
                {
                    "direction": direction,
                    "system": system,
                    "run": str(run),
                    "bleu": round(report["bleu"], 2),
                    "chrf": round(report["chrf"], 2),
                    "length_ratio": round(report["length"]["ratio"], 3),
                    "sentences": len(hyps),
                    "wrong_language": wrong,
                    "wrong_language_rate": wrong / max(len(hyps), 1),
                    "wrong_language_lines": [i + 1 for i in which],
                    "references_wrong_language": floor,
                }
            )
    (args.out / "results.json").write_text(json.dumps(rows, indent=2), "utf-8")
    print("| direction | system | run | valid BLEU | chrF | length ratio | wrong language | refs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['direction']} | {r['system']} | {Path(r['run']).name} | {r['bleu']:.2f} | "
            f"{r['chrf']:.2f} | {r['length_ratio']:.3f} | "
            f"{r['wrong_language']} of {r['sentences']} "
            f"({100 * r['wrong_language_rate']:.2f}%) | {r['references_wrong_language']} |"
        )


if __name__ == "__main__":
    main()
