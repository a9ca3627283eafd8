"""Does a term the plain beam already placed leave the translation alone? (issue 40, item 1)

    python scripts/bench_constrained_identity.py --run runs/demo --src data/demo/test.en

For each line, the plain beam output is decoded first; a word of at least four letters that it
holds exactly once becomes that line's term (a `--constraints` term, so the line is decoded
whole), and the line is decoded again with it. A search that never hurts a sentence gives the
same output; the script prints the identical share, how many constrained outputs are shorter,
and a few that differ. Both decodes use the run's settings with beam 4 and whole lines.
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
    """A word of at least four letters the output holds exactly once (the middle such word)."""
    words = re.findall(r"\w+", output)
    once = [w for w in words if len(w) >= 4 and not w.isdigit() and words.count(w) == 1]
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
    plain = translator.translate(lines)
    picked = [(i, term_of(out)) for i, out in enumerate(plain)]
    picked = [(i, t) for i, t in picked if t is not None]
    constrained = translator.translate(
        [lines[i] for i, _ in picked], constraints=[[t] for _, t in picked]
    )
    same = [plain[i] == out for (i, _), out in zip(picked, constrained)]
    shorter = sum(len(out) < len(plain[i]) for (i, _), out in zip(picked, constrained))
    figures = {
        "run": str(args.run),
        "lines": len(picked),
        "identical": sum(same),
        "identical_share": round(sum(same) / max(len(picked), 1), 4),
        "shorter": shorter,
        "seconds": round(time.perf_counter() - started, 1),
        "examples": [
            {"term": t, "plain": plain[i], "constrained": out}
            for (i, t), out, ok in zip(picked, constrained, same)
            if not ok
        ][:5],
    }
    print(json.dumps(figures, indent=2, ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
