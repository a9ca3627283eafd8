"""Terminology: term use, BLEU and speed of constrained beam search against the plain beam.

    flock -x /work/cpu.lock python scripts/bench_terminology.py --run /work/bench/enfr12

The test set is built from the shared valid split. A word dictionary comes from the train split
(Dice coefficient of lower-cased word co-occurrence over sentence pairs, content words of at
least 4 letters, the best target of each source word, Dice ≥ MIN_DICE and ≥ MIN_PAIRS pairs).
A valid pair gets a term where a source word's dictionary translation occurs in its reference
(whole word, the reference's own form is the term) and *not* in the plain beam-4 output: terms
the model does not produce unconstrained. Each such sentence keeps its first term; the speed
rows per number of constraints use the sentences with at least 4 dictionary terms found in the
reference (whatever the model produces), with their first 1, 2 and 4.

Both searches decode whole lines (no sentence splitting: directly given constraints are per
line) at beam 4 on 2 threads, in the run's batches; tokens/s counts the output's target pieces
+ 1 (EOS), median of PASSES passes, after one warm-up pass.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import load_run_config, with_changes  # noqa: E402
from seq2seq.decode.evaluate import score  # noqa: E402
from seq2seq.decode.glossary import term_use  # noqa: E402
from seq2seq.decode.translator import load_translator  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "enfr"
MIN_DICE, MIN_PAIRS = 0.3, 3
PASSES = 3
WORD = re.compile(r"[^\W\d_]{4,}")  # content-ish words: 4+ letters


def _words(line: str) -> set[str]:
    return {w.lower() for w in WORD.findall(line)}


def build_dictionary(src: list[str], tgt: list[str], wanted: set[str]) -> dict[str, str]:
    """Source word → its best target word by Dice over sentence pairs (only `wanted` words)."""
    src_count, tgt_count, pair = Counter(), Counter(), defaultdict(Counter)
    for s, t in zip(src, tgt):
        sw, tw = _words(s), _words(t)
        tgt_count.update(tw)
        for w in sw & wanted:
            src_count[w] += 1
            pair[w].update(tw)
    out = {}
    for w, counts in pair.items():
        best = max(counts, key=lambda t: 2 * counts[t] / (src_count[w] + tgt_count[t]))
        dice = 2 * counts[best] / (src_count[w] + tgt_count[best])
        if dice >= MIN_DICE and counts[best] >= MIN_PAIRS:
            out[w] = best
    return out


def _surface(word: str, text: str) -> str | None:
    """`word` as `text` writes it (whole word, any case), or None."""
    m = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE)
    return m.group() if m else None


def candidate_terms(src: str, ref: str, dictionary: dict[str, str]) -> list[str]:
    """Target terms of a pair: dictionary translations of its source words found in `ref`."""
    found: list[str] = []
    for w in WORD.findall(src):
        t = dictionary.get(w.lower())
        term = _surface(t, ref) if t else None
        if term and term not in found and term.lower() != w.lower():
            found.append(term)
    return found


def timed(translator, lines: list[str], constraints=None) -> tuple[list[str], float, int]:
    """Outputs, median seconds over PASSES (after a warm-up) and target tokens."""
    translator.translate(lines[:64], constraints[:64] if constraints else None)
    runs, out = [], []
    for _ in range(PASSES):
        start = time.perf_counter()
        out = translator.translate(lines, constraints)
        runs.append(time.perf_counter() - start)
    tokens = sum(len(ids) + 1 for ids in translator.tokenizer.encode_tgt(out))
    return out, statistics.median(runs), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=Path("/work/bench/enfr12"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_terminology"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    src = (DATA / "valid.en").read_text(encoding="utf-8").splitlines()
    ref = (DATA / "valid.fr").read_text(encoding="utf-8").splitlines()
    wanted = set().union(*(_words(s) for s in src))
    train_src = (DATA / "train.en").read_text(encoding="utf-8").splitlines()
    train_tgt = (DATA / "train.fr").read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    dictionary = build_dictionary(train_src, train_tgt, wanted)
    print(f"dictionary: {len(dictionary)} source words ({time.perf_counter() - start:.0f} s)")

    decode = with_changes(
        load_run_config(args.run).decode, {"beam_size": args.beam, "split_sentences": False}
    )
    translator, _ = load_translator(args.run, device="cpu", decode=decode)
    plain_all = translator.translate(src)
    candidates = [candidate_terms(s, r, dictionary) for s, r in zip(src, ref)]
    unk = translator.tokenizer.ids.unk
    ok = [
        [t for t in ts if unk not in translator.tokenizer.encode_tgt([t])[0]] for ts in candidates
    ]
    # The test set: a term the plain output lacks, one per sentence.
    chosen = {
        i: [t for t in ts if _surface(t, plain_all[i]) is None][:1]
        for i, ts in enumerate(ok)
        if any(_surface(t, plain_all[i]) is None for t in ts)
    }
    rows = sorted(chosen)
    lines, refs = [src[i] for i in rows], [ref[i] for i in rows]
    terms = [chosen[i] for i in rows]
    (args.out / "testset.jsonl").write_text(
        "".join(
            json.dumps({"src": s, "ref": r, "terms": t}, ensure_ascii=False) + "\n"
            for s, r, t in zip(lines, refs, terms)
        ),
        encoding="utf-8",
    )
    print(f"test set: {len(rows)} sentences with a term the plain output lacks")

    plain, plain_s, plain_tok = timed(translator, lines)
    kept, kept_s, kept_tok = timed(translator, lines, terms)
    report = {
        "sentences": len(rows),
        "plain": {
            "term_use": term_use(plain, terms),
            "bleu": score(plain, refs).bleu,
            "seconds": plain_s,
            "tokens_per_s": plain_tok / plain_s,
        },
        "constrained": {
            "term_use": term_use(kept, terms),
            "bleu": score(kept, refs).bleu,
            "seconds": kept_s,
            "tokens_per_s": kept_tok / kept_s,
        },
    }
    report["speed_ratio"] = report["constrained"]["tokens_per_s"] / report["plain"]["tokens_per_s"]
    print(json.dumps(report, indent=2))

    report["per_constraint"] = per_constraint_cost(translator, src, ref, ok)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["per_constraint"], indent=2))


def per_constraint_cost(translator, src: list[str], ref: list[str], ok: list[list[str]]) -> dict:
    """Speed, term use and BLEU with 0, 1, 2 and 4 terms on the sentences that have 4."""
    multi = [i for i, ts in enumerate(ok) if len(ts) >= 4]
    many = [src[i] for i in multi]
    print(f"per-constraint cost: {len(multi)} sentences with ≥ 4 dictionary terms")
    free, s0, tok0 = timed(translator, many)
    bleu0 = score(free, [ref[i] for i in multi]).bleu
    costs = {"0": {"tokens_per_s": tok0 / s0, "seconds": s0, "bleu": bleu0}}
    for n in (1, 2, 4):
        given = [ok[i][:n] for i in multi]
        out, secs, tok = timed(translator, many, given)
        costs[str(n)] = {
            "tokens_per_s": tok / secs,
            "seconds": secs,
            "term_use": term_use(out, given),
            "bleu": score(out, [ref[i] for i in multi]).bleu,
        }
        print(n, json.dumps(costs[str(n)]))
    return {"sentences": len(multi), **costs}


if __name__ == "__main__":
    main()
