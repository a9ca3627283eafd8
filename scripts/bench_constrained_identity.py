"""Does a term the plain beam already placed leave the translation alone? (issue 40, item 1)

    python scripts/bench_constrained_identity.py --run runs/demo --src data/demo/test.en

For each line, the plain beam output is decoded first; a word of at least four letters that it
holds exactly once becomes that line's term (a `--constraints` term, so the line is decoded
whole), and the line is decoded again with it. A search that never hurts a sentence gives the
same output; the script prints the identical share, the share that differs but scores higher
under the model (a better translation plain beam search missed: it stops at k finished
hypotheses), how many constrained outputs are shorter, and a few that differ for the worse.
Both decodes use the run's settings with beam 4 and whole lines.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import run_decode  # noqa: E402
from seq2seq.decode.translator import load_translator  # noqa: E402


def term_of(output: str) -> str | None:
    """A whole word of at least four letters (spaces around it, no hyphen or apostrophe inside)
    that the output holds exactly once, also not inside another word (the middle such word)."""
    words = [w.strip(".,;:!?\"«»()") for w in output.split()]
    once = [
        w
        for w in words
        if len(w) >= 4 and w.isalpha() and len(re.findall(re.escape(w), output)) == 1
    ]
    return once[len(once) // 2] if once else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args()
    lines = [x.strip() for x in args.src.read_text().splitlines()][: args.limit]
    decode = run_decode(args.run, beam_size=args.beam, split_sentences=False)
    translator, _ = load_translator(args.run, device="cpu", decode=decode)
    started = time.perf_counter()
    plain_scored = [hyps[0] for hyps in translator.translate_nbest(lines)]
    plain = [text for text, _ in plain_scored]
    picked = [(i, term_of(out)) for i, out in enumerate(plain)]
    picked = [(i, t) for i, t in picked if t is not None]
    found = translator.translate_nbest(
        [lines[i] for i, _ in picked], constraints=[[t] for _, t in picked]
    )
    constrained = [hyps[0][0] for hyps in found]
    same = [plain[i] == out for (i, _), out in zip(picked, constrained)]
    # A different output the model scores higher is one plain beam search missed (it stops at
    # k finished hypotheses), not damage: counted apart.
    better = [
        not ok and hyps[0][1] > plain_scored[i][1] + 1e-4
        for (i, _), hyps, ok in zip(picked, found, same)
    ]
    shorter = sum(len(out) < len(plain[i]) for (i, _), out in zip(picked, constrained))
    figures = {
        "run": str(args.run),
        "lines": len(picked),
        "identical": sum(same),
        "identical_share": round(sum(same) / max(len(picked), 1), 4),
        "different_but_scored_higher": sum(better),
        "identical_or_higher_share": round((sum(same) + sum(better)) / max(len(picked), 1), 4),
        "shorter": shorter,
        "seconds": round(time.perf_counter() - started, 1),
        "examples": [
            {"term": t, "plain": plain[i], "constrained": out}
            for (i, t), out, ok, up in zip(picked, constrained, same, better)
            if not ok and not up
        ][:5],
    }
    print(json.dumps(figures, indent=2, ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
