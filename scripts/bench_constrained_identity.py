"""Does a term the plain beam already placed leave the translation alone? (issue 40, item 1)

    python scripts/bench_constrained_identity.py --run runs/demo --src data/demo/test.en

For each line, the plain beam output is decoded first; a word of at least four letters that it
holds exactly once becomes that line's term (a `--constraints` term, so the line is decoded
whole), and the line is decoded again with it.

`--glossary dictionary`: a glossary built as a dictionary would be, on the enfr valid split.

    python scripts/bench_constrained_identity.py --glossary dictionary \
        --run /work/bench/s6/teacher --limit 1000

The glossary is the word dictionary of scripts/bench_terminology.py (Dice over the train split,
seq2seq.data.term_dictionary.dice_dictionary, over the valid split's source words), less the
words that stay the same; each valid line is decoded with it. The lines scored are those with a
glossary hit whose plain output already holds each target term exactly as often as its source
term occurs (glossary.occurrences), as the search counts a held term.

A search that never hurts a sentence gives the same output on the lines scored; the script prints
the identical share, the share that differs but scores higher under the model, how many
constrained outputs are shorter, how many rows the plain beam answered (it held every term, so
no constrained search ran: `ConstrainedHypothesis.plain`), and a few that differ for the worse.
Both decodes use the run's settings with beam 4 and whole lines, on the CPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import run_decode  # noqa: E402
from seq2seq.data.term_dictionary import WORD, dice_dictionary  # noqa: E402
from seq2seq.decode.glossary import make_glossary, occurrences  # noqa: E402
from seq2seq.decode.segments import flatten  # noqa: E402
from seq2seq.decode.translator import load_translator  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "enfr"


def term_of(output: str) -> str | None:
    """A whole word of at least four letters (spaces around it, no hyphen or apostrophe inside)
    that the output holds exactly once, also not inside another word (the middle such word)."""
    words = [w.strip('.,;:!?"«»()') for w in output.split()]
    once = [
        w
        for w in words
        if len(w) >= 4 and w.isalpha() and len(re.findall(re.escape(w), output)) == 1
    ]
    return once[len(once) // 2] if once else None


def with_terms(translator, lines: list[str], constraints=None, glossary=None):
    """(text, score, answered by the plain beam) of each line's best output, decoded whole
    with `constraints` (per line) or `glossary`."""
    sources = translator.prepare(lines, constraints=constraints, glossary=glossary)
    segments = flatten(sources)
    found = translator.search(segments)
    best = {s.owner: hyps[0] for s, hyps in zip(segments, found)}
    texts = translator.tokenizer.decode_tgt([best[i].tokens for i in sorted(best)])
    out = [("", 0.0, True)] * len(lines)
    for i, text in zip(sorted(best), texts):
        out[i] = (" ".join(text.split()), best[i].score, getattr(best[i], "plain", False))
    return out


def dictionary_glossary(lines: list[str]):
    """The train split's Dice dictionary over the source words of `lines`, less identical
    words, as a glossary."""
    wanted = {w.lower() for line in lines for w in WORD.findall(line)}
    train_src = (DATA / "train.en").read_text(encoding="utf-8").splitlines()
    train_tgt = (DATA / "train.fr").read_text(encoding="utf-8").splitlines()
    words = dice_dictionary(train_src, train_tgt, wanted=wanted)
    return make_glossary(sorted((s, t) for s, t in words.items() if s != t), origin="dictionary")


def holds(output: str, terms: list[str]) -> bool:
    """Whether `output` holds each term exactly as often as `terms` lists it."""
    return all(occurrences(t, output) == n for t, n in Counter(terms).items())


def figures(picked, plain_scored, found, all_found=None) -> dict:
    """The identity figures of the `picked` lines' outputs `found` against the plain ones."""
    plain = [text for text, _ in plain_scored]
    same = [plain[i] == out for i, (out, _, _) in zip(picked, found)]
    # A different output the model scores higher is one plain beam search missed (it stops at
    # k finished hypotheses), not damage: counted apart.
    better = [
        not ok and s > plain_scored[i][1] + 1e-4 for i, (_, s, _), ok in zip(picked, found, same)
    ]
    n = max(len(picked), 1)
    return {
        "lines": len(picked),
        "identical": sum(same),
        "identical_share": round(sum(same) / n, 4),
        "different_but_scored_higher": sum(better),
        "identical_or_higher_share": round((sum(same) + sum(better)) / n, 4),
        "shorter": sum(len(out) < len(plain[i]) for i, (out, _, _) in zip(picked, found)),
        "answered_by_the_plain_beam": sum(p for _, _, p in found),
        "examples": [
            {"plain": plain[i], "constrained": out}
            for i, (out, _, _), ok, up in zip(picked, found, same, better)
            if not ok and not up
        ][:5],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--src", type=Path, help="the source lines (dictionary: the valid split)")
    p.add_argument("--glossary", choices=("plain-word", "dictionary"), default="plain-word")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args()
    src = args.src or (DATA / "valid.en" if args.glossary == "dictionary" else None)
    if src is None:
        p.error("--src is needed with --glossary plain-word")
    lines = [x.strip() for x in src.read_text(encoding="utf-8").splitlines()][: args.limit]
    decode = run_decode(args.run, beam_size=args.beam, split_sentences=False)
    translator, _ = load_translator(args.run, device="cpu", decode=decode)
    started = time.perf_counter()
    plain_scored = [hyps[0] for hyps in translator.translate_nbest(lines)]
    plain = [text for text, _ in plain_scored]
    report = {"run": str(args.run), "src": str(src), "glossary": args.glossary}
    if args.glossary == "plain-word":
        picked = [(i, term_of(out)) for i, out in enumerate(plain)]
        picked = [(i, t) for i, t in picked if t is not None]
        found = with_terms(translator, [lines[i] for i, _ in picked], [[t] for _, t in picked])
        report |= figures([i for i, _ in picked], plain_scored, found)
    else:
        glossary = dictionary_glossary(lines)
        hit = [i for i, line in enumerate(lines) if glossary.terms_in(line)]
        found = with_terms(translator, [lines[i] for i in hit], glossary=glossary)
        held = [j for j, i in enumerate(hit) if holds(plain[i], glossary.terms_in(lines[i]))]
        report |= {"glossary_pairs": len(glossary.pairs), "lines_with_a_hit": len(hit)}
        report["hit_lines_answered_by_the_plain_beam"] = sum(p for _, _, p in found)
        report |= figures([hit[j] for j in held], plain_scored, [found[j] for j in held])
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
