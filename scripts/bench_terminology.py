"""Terminology: term use, BLEU and speed of constrained beam search against the plain beam.

    flock -x /work/cpu.lock python scripts/bench_terminology.py --run /work/bench/enfr12

The test set is built from the shared valid split. A word dictionary comes from the train split
(seq2seq.data.term_dictionary.dice_dictionary: Dice coefficient of lower-cased word co-occurrence
over sentence pairs, content words of at least 4 letters, the best target of each source word,
Dice ≥ 0.3 over ≥ 3 pairs; the dictionary data.augment.terms builds, there less identical words).
A valid pair gets a term where a source word's dictionary translation occurs in its reference
(whole word, the reference's own form is the term) and *not* in the plain beam-4 output: terms
the model does not produce unconstrained. Each such sentence keeps its first term; the speed
rows per number of constraints use the sentences with at least 4 dictionary terms found in the
reference (whatever the model produces), with their first 1, 2 and 4.

Both searches decode whole lines (no sentence splitting: directly given constraints are per
line) at beam 4 on 2 threads, in the run's batches; tokens/s counts the output's target pieces
+ 1 (EOS), median of PASSES passes, after one warm-up pass.

`--glossary preferred`: glossaries the model would not choose, as a client's style guide
holds them.

    flock -x /work/cpu.lock python scripts/bench_terminology.py --glossary preferred \
        --run /work/bench/s6/teacher --first 500 --last 1000

The same dictionary, over the source words of the scored pairs (valid pairs FIRST to LAST, by
default the 500 never used for choosing a checkpoint). Terms are the dictionary's pairs whose
usual translation is a noun of PREFERRED found in at least MIN_HITS references, the MOST_TERMS
most found; each usual translation is replaced by PREFERRED's synonym, or for a seeded
MADE_UP_SHARE of them by a made-up company name of MADE_UP. A pair is scored when the glossary
finds a source term in it and its reference holds each term's usual translation exactly as often
as the source term (lower case, whole words); its term-injected reference has those words
replaced by the terms. Both searches decode whole lines at beam 4 (one pass each, after a short
warm-up); the others are given the glossary, applied as each `--term-mode` says (comma-separated,
default `constrain`: constrained beam search; `annotate`: the source annotated inline with the
terms and the plain beam, for a run trained with data.augment.terms; `both`), one row each.
Reported per row: term use, BLEU against the injected references, the plain output's BLEU against
the original references, outputs holding a fragment of a term outside a complete occurrence, term
occurrences written after the output's final sentence mark, sentences/s. Targets (issue 40):
term use ≥ 98%, BLEU ≥ plain − 0.5, no fragments, ≤ 1% of terms after the final mark.

    flock -x /work/cpu.lock python scripts/bench_terminology.py --glossary preferred \
        --run /work/bench/s7/dinu --term-mode constrain,annotate,both
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import load_run_config, with_changes  # noqa: E402
from seq2seq.data.term_dictionary import WORD, dice_dictionary  # noqa: E402
from seq2seq.decode.evaluate import score  # noqa: E402
from seq2seq.decode.glossary import make_glossary, term_use  # noqa: E402
from seq2seq.decode.translator import load_translator  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "enfr"
PASSES = 3
TERM_MODES = ("constrain", "annotate", "both")

# Usual translation → a synonym a style guide might prefer (some hyphenated or of several words,
# as company terms often are). Only nouns: a glossary holds names of things.
PREFERRED = {
    "valeur": "montant",
    "valeurs": "montants",
    "texte": "libellé",
    "écran": "moniteur",
    "liste": "inventaire",
    "filtre": "tamis",
    "données": "informations",
    "système": "plateforme",
    "ligne": "rangée",
    "lignes": "rangées",
    "colonne": "rubrique",
    "dialogue": "boîte-dialogue",
    "ordinateur": "poste de travail",
    "couleur": "teinte",
    "couleurs": "teintes",
    "fonction": "routine",
    "fonctions": "routines",
    "priorité": "préséance",
    "fichier": "document",
    "fichiers": "documents",
    "fenêtre": "croisée",
    "paragraphe": "alinéa",
    "plage": "intervalle",
    "noyau": "cœur-système",
    "champ": "zone de saisie",
    "cellule": "case",
    "paramètres": "réglages",
    "bouton": "bouton-poussoir",
    "dossier": "répertoire",
    "image": "illustration",
    "utilisateur": "usager",
    "clavier": "pupitre",
    "numérotation": "numérotage",
    "luminosité": "clarté",
    "processus": "procédé",
    "hauteur": "élévation",
    "journaux": "registres",
}
# Made-up company names: words the model has never seen.
MADE_UP = ("Zentrix", "Korvalo", "Plenith-Pro", "Vexora", "Quandor", "Tesslink", "Orvanta")
MADE_UP_SHARE = 0.3
MIN_HITS, MOST_TERMS = 3, 24
FINAL_MARKS = ".!?…"


def _words(line: str) -> set[str]:
    return {w.lower() for w in WORD.findall(line)}


def build_dictionary(src: list[str], tgt: list[str], wanted: set[str]) -> dict[str, str]:
    """Source word → its best target word by Dice over sentence pairs (only `wanted` words)."""
    return dice_dictionary(src, tgt, wanted=wanted)


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


def _whole(word: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")


def preferred_glossary(
    dictionary: dict[str, str], src: list[str], ref: list[str], seed: int = 0
) -> list[tuple[str, str, str]]:
    """(source word, usual translation, preferred term) of the dictionary's words whose usual
    translation is a PREFERRED noun found in at least MIN_HITS pairs (source word and usual
    translation both there), the MOST_TERMS most found; a seeded MADE_UP_SHARE of them get a
    MADE_UP name instead of the synonym."""
    hits: Counter = Counter()
    for s, r in zip(src, ref):
        for w in _words(s):
            usual = dictionary.get(w)
            if usual in PREFERRED and _whole(usual).search(r):
                hits[w] += 1
    chosen = sorted((w for w in hits if hits[w] >= MIN_HITS), key=lambda w: (-hits[w], w))
    rng = random.Random(seed)
    names = rng.sample(MADE_UP, len(MADE_UP))
    term_of: dict[str, str] = {}
    out = []
    for w in chosen[:MOST_TERMS]:
        usual = dictionary[w]
        if usual not in term_of:
            made_up = names and rng.random() < MADE_UP_SHARE
            term_of[usual] = names.pop() if made_up else PREFERRED[usual]
        out.append((w, usual, term_of[usual]))
    return out


def inject(reference: str, usual: str, term: str) -> tuple[str, int]:
    """`reference` with each whole-word `usual` translation replaced by `term`, and how many."""
    return _whole(usual).subn(lambda _: term, reference)


def injected_pair(reference: str, hits: list[str], usual_of: dict[str, str]) -> str | None:
    """The term-injected reference of a pair whose glossary hits are `hits` (target terms,
    one per source occurrence), or None when the reference does not hold each term's usual
    translation exactly as often as its source term occurs."""
    wanted = Counter(usual_of[t] for t in hits)
    term_of = {usual_of[t]: t for t in hits}
    for usual, times in wanted.items():
        reference, found = inject(reference, usual, term_of[usual])
        if found != times:
            return None
    return reference


def fragments(output: str, term: str, strict: bool = False) -> int:
    """Places where `output` starts `term` and leaves it unfinished, outside its complete
    occurrences: a word start holding a prefix of the term that reaches past the term's first
    word ("bouton-p", "bouton-les" for "bouton-poussoir"); with `strict` (a made-up name, never
    a word of its own), any prefix of 3 or more characters ("Zentr" for "Zentrix")."""
    masked = _whole(term).sub(lambda m: "\0" * len(m.group()), output)
    first = re.match(r"\w+", term)
    if strict or first is None or first.end() == len(term):
        shortest = 3 if strict else len(term)  # a real word alone: no fragment but itself
    else:  # past the first word: "bouton-", or "poste d" (a space alone ends natural words)
        shortest = first.end() + (2 if term[first.end()].isspace() else 1)
    count = 0
    for start in (m.start() for m in re.finditer(r"(?<![\w\0])\S", masked)):
        same = 0
        while start + same < len(masked) and same < len(term):
            if masked[start + same] != term[same]:
                break
            same += 1
        glued_on = masked[start + same : start + same + 1].isalnum()
        count += shortest <= same < len(term) or (strict and same == len(term) and glued_on)
    return count


def after_final_mark(output: str, terms: list[str]) -> int:
    """Term occurrences written after the output's last sentence-final mark with nothing but
    terms, spaces and punctuation after that mark ("la fenêtre suivante est affichée.
    croisée.")."""
    masked = output
    for term in sorted(set(terms), key=len, reverse=True):
        masked = _whole(term).sub(lambda m: "\0" * len(m.group()), masked)
    tail = len(masked)
    while tail and not (masked[tail - 1].isalnum() or masked[tail - 1] == "_"):
        tail -= 1
    marks = [i for i in range(tail, len(masked)) if masked[i] in FINAL_MARKS]
    if not marks:
        return 0
    after = masked[marks[0] :]
    return len(re.findall(r"\0+", after))


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
    parser.add_argument("--glossary", choices=("learned", "preferred"), default="learned")
    parser.add_argument("--first", type=int, default=500, help="preferred: first valid pair")
    parser.add_argument("--last", type=int, default=1000, help="preferred: end of the pairs")
    parser.add_argument("--limit", type=int, default=0, help="preferred: at most this many")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--term-mode",
        type=term_modes,
        default=("constrain",),
        help="preferred: how the glossary is applied, comma-separated, a row each: "
        + ", ".join(TERM_MODES),
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.glossary == "preferred":
        preferred(args)
    else:
        learned(args)


def term_modes(value: str) -> tuple[str, ...]:
    """`--term-mode`'s comma-separated modes, each checked."""
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    bad = [m for m in modes if m not in TERM_MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"term modes are {', '.join(TERM_MODES)}, not {value!r}")
    return modes


def learned(args) -> None:
    """The glossary from the train split's own translations, terms the plain output lacks."""

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


def preferred(args) -> None:
    """Glossaries the model would not choose (see the module docstring), scored against
    term-injected references beside the plain output against the original ones."""
    src = (DATA / "valid.en").read_text(encoding="utf-8").splitlines()[args.first : args.last]
    ref = (DATA / "valid.fr").read_text(encoding="utf-8").splitlines()[args.first : args.last]
    train_src = (DATA / "train.en").read_text(encoding="utf-8").splitlines()
    train_tgt = (DATA / "train.fr").read_text(encoding="utf-8").splitlines()
    dictionary = build_dictionary(train_src, train_tgt, set().union(*map(_words, src)))
    decode = with_changes(
        load_run_config(args.run).decode, {"beam_size": args.beam, "split_sentences": False}
    )
    translator, _ = load_translator(args.run, device="cpu", decode=decode)
    unk = translator.tokenizer.ids.unk
    entries = [
        e
        for e in preferred_glossary(dictionary, src, ref, args.seed)
        if unk not in translator.tokenizer.encode_tgt([e[2]])[0]
    ]
    glossary = make_glossary([(w, term) for w, _, term in entries])
    usual_of = {term: usual for _, usual, term in entries}
    rows, found = [], 0
    for s, r in zip(src, ref):
        hits = glossary.terms_in(s)
        found += bool(hits)
        injected = injected_pair(r, hits, usual_of) if hits else None
        if injected is not None:
            rows.append({"src": s, "ref": r, "injected": injected, "terms": hits})
    if args.limit and len(rows) > args.limit:
        rows = random.Random(args.seed).sample(rows, args.limit)
    print(f"glossary: {len(entries)} terms; {found} pairs with a term, {len(rows)} scored")
    made_up = {e[2] for e in entries if e[2] in MADE_UP}
    report = score_preferred(translator, rows, made_up, glossary, args.term_mode)
    report["glossary"] = [list(e) for e in entries]
    report["pairs"] = {"first": args.first, "last": args.last, "with_a_term": found}
    (args.out / "preferred.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    shown = {k: v for k, v in report.items() if k not in ("glossary", "outputs")}
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    print(table(report))


def score_preferred(
    translator, rows: list[dict], made_up: set[str], glossary, modes=("constrain",)
) -> dict:
    """Decode the scored pairs plainly, then with the glossary in each term mode; the plain
    figures and a row per mode."""
    lines, terms = [r["src"] for r in rows], [r["terms"] for r in rows]
    translator.translate(lines[:8])  # warm-up
    start = time.perf_counter()
    plain = translator.translate(lines)
    plain_s = time.perf_counter() - start
    refs, injected = [r["ref"] for r in rows], [r["injected"] for r in rows]
    report = {
        "sentences": len(rows),
        "terms": sum(map(len, terms)),
        "plain": {
            "term_use": term_use(plain, terms),
            "bleu_injected": score(plain, injected).bleu,
            "plain_bleu": score(plain, refs).bleu,
            "sentences_per_s": len(rows) / plain_s,
        },
        "modes": {},
    }
    for row, p in zip(rows, plain):
        row["plain"] = p
    for mode in modes:
        outputs, seconds, applied = glossary_outputs(translator, lines, glossary, mode)
        for row, out in zip(rows, outputs):
            row[mode] = out
        figures = mode_figures(outputs, rows, made_up)
        report["modes"][mode] = {
            "applied_as": applied,
            **figures,
            "plain_bleu": report["plain"]["plain_bleu"],
            "sentences_per_s": len(rows) / seconds,
        }
    report["outputs"] = rows
    return report


def glossary_outputs(translator, lines: list[str], glossary, mode: str):
    """Outputs with the glossary applied as `mode` says, their seconds, and the mode applied
    (a run not trained with terms constrains instead of annotating)."""
    t, options = translator, translator.options.model_copy(update={"term_mode": mode})
    t.translate_sources(
        t.prepare(lines[:8], options, glossary=glossary), options=options
    )  # warm-up
    start = time.perf_counter()
    found = t.translate_sources(t.prepare(lines, options, glossary=glossary), options=options)
    seconds = time.perf_counter() - start
    return [best[0][0] for best in found], seconds, t.terms.mode(options)


def mode_figures(outputs: list[str], rows: list[dict], made_up: set[str]) -> dict:
    """Term use, BLEU against the injected references, fragments and late terms of outputs."""
    terms, injected = [r["terms"] for r in rows], [r["injected"] for r in rows]
    total = sum(map(len, terms))
    broken = [
        i
        for i, (out, ts) in enumerate(zip(outputs, terms))
        if any(fragments(out, t, t in made_up) for t in set(ts))
    ]
    late_at = [i for i, (out, ts) in enumerate(zip(outputs, terms)) if after_final_mark(out, ts)]
    late = sum(after_final_mark(outputs[i], terms[i]) for i in late_at)

    def example(i: int) -> dict:
        return {"src": rows[i]["src"], "injected": injected[i], "output": outputs[i]}

    return {
        "term_use": term_use(outputs, terms),
        "bleu_injected": score(outputs, injected).bleu,
        "outputs_with_fragments": len(broken),
        "after_final_mark": {"count": late, "share_of_terms": late / total if total else 0.0},
        "examples": {
            "fragments": [example(i) for i in broken[:10]],
            "after_final_mark": [example(i) for i in late_at[:10]],
        },
    }


def table(report: dict) -> str:
    """The rows as a Markdown table: plain, then each term mode."""
    head = (
        "| search | term use | BLEU injected | plain BLEU | fragments | after final mark | sent/s |"
    )
    lines = [head, "|" + " --- |" * 7]
    p = report["plain"]
    lines.append(
        f"| plain | {p['term_use']['rate']:.1%} | {p['bleu_injected']:.1f} | {p['plain_bleu']:.1f} "
        f"| – | – | {p['sentences_per_s']:.1f} |"
    )
    for mode, m in report["modes"].items():
        late = m["after_final_mark"]
        name = mode if m["applied_as"] == mode else f"{mode} (as {m['applied_as']})"
        lines.append(
            f"| {name} | {m['term_use']['rate']:.1%} | {m['bleu_injected']:.1f} "
            f"| {m['plain_bleu']:.1f} "
            f"| {m['outputs_with_fragments']} | {late['count']} ({late['share_of_terms']:.1%}) "
            f"| {m['sentences_per_s']:.1f} |"
        )
    return "\n".join(lines)


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
