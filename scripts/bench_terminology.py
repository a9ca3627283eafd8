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
most found; each usual translation is replaced by PREFERRED's synonym (some of another gender:
valeur → montant, plage → intervalle, système → plateforme; plurals; several words), or for a
seeded MADE_UP_SHARE of them by a made-up company name of MADE_UP; each term has a gender and
number column (FEATURES, MADE_UP_GENDER), given to the glossary where this version reads one.
A pair is scored when the glossary finds a source term in it and its reference holds each term's
usual translation exactly as often as the source term (lower case, whole words); its naive
term-injected reference has those words replaced by the terms ("la montant", "l'Korvalo"), and
its repaired one has the determiner before each term made to agree by this script's own rules
(FORMS: elision, gender and number, du/au; not the code under test's repair). 60 repaired
references were read and corrected by hand (benchmarks/terminology_checked.tsv, valid line
number and reference): the report says how often the automatic repair agrees with them.

Both searches decode whole lines at beam 4 (after a short warm-up; each mode's speed is the median
of PASSES passes alternated with plain passes, against their median); the others are
given the glossary, applied as each `--term-mode` says (comma-separated, default
`constrain,place`: `constrain`, constrained beam search; `place`, the plain beam with the terms
placed and the grammar repaired, where this version takes it (else the row is skipped with a
note); `annotate`: the source annotated inline with the terms and the plain beam, for a run
trained with data.augment.terms; `both`), one row each. Reported per row (term_metrics.py): term
use and success (surface, lemma), BLEU against the naive, repaired and hand-checked references,
chrF with the terms masked, agreement accuracy at the terms, window overlap, derailment (terms
after the final mark, fragments, repeated n-grams and length against the plain output), the
lines whose plain output already held their terms and how many came out identical to it, and
the speed relative to the plain beam. Targets (issue 53): term success ≥ 98%, BLEU against the
repaired references ≥ plain's against the original − 0.5, masked chrF ≥ plain's − 0.5,
agreement ≥ 95%, no term after the final mark, no fragments, lines held 100% identical, speed
≥ 0.8×.

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

from seq2seq.config import DecodeConfig, load_run_config, with_changes  # noqa: E402
from seq2seq.data.term_dictionary import WORD, dice_dictionary  # noqa: E402
from seq2seq.decode.evaluate import score  # noqa: E402
from seq2seq.decode.glossary import make_glossary, term_use  # noqa: E402
from seq2seq.decode.glossary_files import TermEntry  # noqa: E402
from seq2seq.decode.term_metrics import (  # noqa: E402
    after_final_mark,
    features,
    masked_chrf,
    takes_elision,
    term_report,
)
from seq2seq.decode.translator import load_translator  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "enfr"
PASSES = 3
TERM_MODES = ("constrain", "annotate", "both", "place")
CHECKED = REPO / "benchmarks" / "terminology_checked.tsv"

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
    "dossier": "chemise",
    "clé": "mot-clé",
    "image": "illustration",
    "utilisateur": "usager",
    "clavier": "pupitre",
    "numérotation": "numérotage",
    "luminosité": "clarté",
    "processus": "procédé",
    "hauteur": "élévation",
    "journaux": "registres",
}
# The glossary's gender and number column of each preferred term.
FEATURES = {
    "montant": "m sg", "montants": "m pl", "libellé": "m sg", "moniteur": "m sg",
    "inventaire": "m sg", "tamis": "m sg", "informations": "f pl", "plateforme": "f sg",
    "rangée": "f sg", "rangées": "f pl", "rubrique": "f sg", "boîte-dialogue": "f sg",
    "poste de travail": "m sg", "teinte": "f sg", "teintes": "f pl", "routine": "f sg",
    "routines": "f pl", "préséance": "f sg", "document": "m sg", "documents": "m pl",
    "croisée": "f sg", "alinéa": "m sg", "intervalle": "m sg", "cœur-système": "m sg",
    "zone de saisie": "f sg", "case": "f sg", "réglages": "m pl", "bouton-poussoir": "m sg",
    "chemise": "f sg", "mot-clé": "m sg", "illustration": "f sg", "usager": "m sg",
    "pupitre": "m sg", "numérotage": "m sg", "clarté": "f sg", "procédé": "m sg",
    "élévation": "f sg", "registres": "m pl",
}  # fmt: skip
# Made-up company names: words the model has never seen; their gender as a client's glossary
# would give it (the number is that of the word they replace).
MADE_UP = ("Zentrix", "Korvalo", "Plenith-Pro", "Vexora", "Quandor", "Tesslink", "Orvanta")
MADE_UP_GENDER = {"Zentrix": "m", "Korvalo": "m", "Plenith-Pro": "m", "Vexora": "f"}
MADE_UP_GENDER |= {"Quandor": "m", "Tesslink": "m", "Orvanta": "f"}
MADE_UP_SHARE = 0.3
MIN_HITS, MOST_TERMS = 3, 24


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
) -> list[tuple[str, str, str, str]]:
    """(source word, usual translation, preferred term, its gender and number) of the
    dictionary's words whose usual translation is a PREFERRED noun found in at least MIN_HITS
    pairs (source word and usual translation both there), the MOST_TERMS most found; a seeded
    MADE_UP_SHARE of them get a MADE_UP name instead of the synonym."""
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
        out.append((w, usual, term_of[usual], _features_of(term_of[usual], usual)))
    return out


def _features_of(term: str, usual: str) -> str:
    """The gender column of a term: FEATURES', or a made-up name's gender and the number of
    the synonym it stands for."""
    if term in MADE_UP_GENDER:
        return f"{MADE_UP_GENDER[term]} {FEATURES[PREFERRED[usual]].split()[1]}"
    return FEATURES[term]


def glossary_of(entries: list[tuple[str, str, str, str]]):
    """The glossary the searches get, with its gender and number column."""
    return make_glossary([TermEntry(w, term, *features(spec)) for w, _, term, spec in entries])


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


# The benchmark's own French rules for its term-injected references, kept apart from the code
# under test (decode/term_repair*.py): the determiner before each injected term made to agree
# with the term's gender and number, elided or not, contracted with "de" and "à". A determiner's
# forms: masculine, feminine, masculine and feminine before a vowel, masculine and feminine plural.
FORMS = {
    "def": ("le", "la", "l'", "l'", "les", "les"),
    "de": ("du", "de la", "de l'", "de l'", "des", "des"),
    "à": ("au", "à la", "à l'", "à l'", "aux", "aux"),
    "indef": ("un", "une", "un", "une", "des", "des"),
    "dem": ("ce", "cette", "cet", "cette", "ces", "ces"),
    "mon": ("mon", "ma", "mon", "mon", "mes", "mes"),
    "ton": ("ton", "ta", "ton", "ton", "tes", "tes"),
    "son": ("son", "sa", "son", "son", "ses", "ses"),
    "aucun": ("aucun", "aucune", "aucun", "aucune", "aucuns", "aucunes"),
    "quel": ("quel", "quelle", "quel", "quelle", "quels", "quelles"),
    "prep": ("de", "de", "d'", "d'", "de", "de"),
    "que": ("que", "que", "qu'", "qu'", "que", "que"),
}
KIND_OF = {form: kind for kind, forms in FORMS.items() for form in forms}
KIND_OF |= {"des": "indef", "de": "prep", "d'": "prep", "de le": "de", "de les": "de"}
KIND_OF |= {"à le": "à", "à les": "à"}
# The end of the text before a term: a determiner of two words, an elided one, or a word.
_BEFORE = re.compile(
    r"(?<![\w'’-])((?:de|à)\s+(?:la|les|le)\s+|(?:de|à)\s+l['’]|\w+['’]|\w+\s+)$", re.IGNORECASE
)


def determiner(kind: str, gender: str | None, number: str | None, vowel: bool) -> str:
    """The form of a determiner `kind` (FORMS) before a term of this gender, number and start."""
    m, f, m_vowel, f_vowel, m_pl, f_pl = FORMS[kind]
    if kind in ("prep", "que"):  # no gender, no number: elided or not ("d'informations")
        return m_vowel if vowel else m
    if number == "pl":
        return f_pl if gender == "f" else m_pl
    if vowel:
        return f_vowel if gender == "f" else m_vowel
    return f if gender == "f" else m


def repair_before(head: str, term: str, spec: str) -> str:
    """`head`, the text before an injected `term`, with its last determiner made to agree."""
    m = _BEFORE.search(head)
    if not m:
        return head
    written = m.group(1)
    word = " ".join(written.lower().replace("’", "'").split())
    kind = KIND_OF.get(word)
    if kind is None:
        return head
    gender, number = features(spec)
    if number is None:  # the determiner written says it
        number = "pl" if word in ("les", "des", "ces", "mes", "tes", "ses", "aux") else "sg"
    new = determiner(kind, gender, number, takes_elision(term.split()[0]))
    new = new[0].upper() + new[1:] if written[0].isupper() else new
    return head[: m.start()] + new + ("" if new.endswith("'") else " ")


def repair_reference(text: str, specs: dict[str, str]) -> str:
    """A term-injected reference with the determiner before each term (`specs`: term → its
    gender and number) agreeing, right to left so that earlier spans stay put; a term that
    repeats the head of the phrase it went into takes that phrase's place ("boîte de
    boîte-dialogue" → "boîte-dialogue")."""
    found = sorted(
        (m.start(), m.end(), term) for term in specs for m in _whole(term).finditer(text)
    )
    for start, end, term in reversed(found):
        head, written = _repeated_head(text[:start], term)
        head = repair_before(head, term, specs[term])
        text = head + written + text[end:]
    return text


def _repeated_head(head: str, term: str) -> tuple[str, str]:
    """`head` without a phrase head the term repeats ("boîtes de " before "boîte-dialogue"),
    and the term as that head wrote its first word (plural, capital), else as it is."""
    first = re.match(r"\w+", term).group()
    m = re.search(rf"(?<!\w){re.escape(first)}s?\s+de\s+$", head, re.IGNORECASE)
    if first == term or not m:
        return head, term
    return head[: m.start()], m.group().split()[0] + term[len(first) :]


def read_checked(path: Path = CHECKED) -> dict[int, str]:
    """The hand-checked repaired references: valid line number (0-based) → reference."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        number, reference = line.split("\t", 1)
        out[int(number)] = reference
    return out


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
        default=("constrain", "place"),
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
    term-injected references, naive and repaired, beside the plain output."""
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
    glossary = glossary_of(entries)
    rows, found = scored_rows(glossary, entries, src, ref, args.first)
    if args.limit and len(rows) > args.limit:
        rows = random.Random(args.seed).sample(rows, args.limit)
    print(f"glossary: {len(entries)} terms; {found} pairs with a term, {len(rows)} scored")
    made_up = {e[2] for e in entries if e[2] in MADE_UP}
    specs = {e[2]: e[3] for e in entries}
    references = reference_figures(rows, read_checked())  # before scoring: rows get "checked"
    report = score_preferred(translator, rows, made_up, glossary, args.term_mode, specs)
    report["references"] = references
    report["glossary"] = [list(e) for e in entries]
    report["pairs"] = {"first": args.first, "last": args.last, "with_a_term": found}
    (args.out / "preferred.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    shown = {k: v for k, v in report.items() if k not in ("glossary", "outputs")}
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    print(table(report))


def scored_rows(glossary, entries, src: list[str], ref: list[str], first: int = 0):
    """The pairs scored (valid line number, source, reference, its naive term-injected and
    repaired forms, the terms and their usual translations), and how many pairs had a term."""
    usual_of = {term: usual for _, usual, term, _ in entries}
    specs = {term: spec for _, _, term, spec in entries}
    rows, found = [], 0
    for i, (s, r) in enumerate(zip(src, ref)):
        hits = glossary.terms_in(s)
        found += bool(hits)
        injected = injected_pair(r, hits, usual_of) if hits else None
        if injected is not None:
            repaired = repair_reference(injected, {t: specs[t] for t in hits})
            rows.append(
                {"line": first + i, "src": s, "ref": r, "injected": injected}
                | {"repaired": repaired, "terms": hits, "usual": [usual_of[t] for t in hits]}
            )
    return rows, found


def reference_figures(rows: list[dict], checked: dict[int, str]) -> dict:
    """How many references the repair changed, and how it agrees with the hand-checked lines
    (the naive swap beside it); each row gets its checked reference, where there is one."""
    hand = [r for r in rows if r["line"] in checked]
    for r in hand:
        r["checked"] = checked[r["line"]]
    return {
        "lines": len(rows),
        "changed_by_repair": sum(r["repaired"] != r["injected"] for r in rows),
        "checked_lines": len(hand),
        "repair_agrees_with_checked": sum(r["repaired"] == r["checked"] for r in hand),
        "naive_agrees_with_checked": sum(r["injected"] == r["checked"] for r in hand),
        "disagreements": [
            {"line": r["line"], "repaired": r["repaired"], "checked": r["checked"]}
            for r in hand
            if r["repaired"] != r["checked"]
        ][:20],
    }


def mode_accepted(mode: str) -> bool:
    """Whether this version's decode.term_mode takes `mode`."""
    try:
        DecodeConfig(term_mode=mode)
    except ValueError:  # pydantic's ValidationError
        return False
    return True


def score_preferred(
    translator, rows: list[dict], made_up: set[str], glossary, modes=("constrain",), specs=None
) -> dict:
    """Decode the scored pairs plainly, then with the glossary in each term mode this version
    takes (the others noted as skipped); the plain figures and a row per mode."""
    lines, terms = [r["src"] for r in rows], [r["terms"] for r in rows]
    translator.translate(lines[:8])  # warm-up
    plain, plain_s = _timed_plain(translator, lines)
    refs = [r["ref"] for r in rows]
    report = {
        "sentences": len(rows),
        "terms": sum(map(len, terms)),
        "plain": {
            **mode_figures(plain, rows, made_up, plain, specs),
            "plain_bleu": score(plain, refs).bleu,
            # The usual translations masked in the plain output and the original references.
            "plain_masked_chrf": masked_chrf(plain, refs, [r.get("usual", []) for r in rows]),
            "sentences_per_s": len(rows) / plain_s,
        },
        "modes": {},
        "skipped": {},
    }
    for row, p in zip(rows, plain):
        row["plain"] = p
    report["swap_oracle"] = swap_oracle(rows, plain, specs or {})
    for mode in modes:
        if not mode_accepted(mode):
            report["skipped"][mode] = "this version's decode.term_mode does not take it"
            continue
        # The mode's passes alternate with plain ones: this VM's speed drifts by up to 30%
        # between runs minutes apart, and the ratio is read from medians of pairs.
        outputs, seconds, applied, stats, plain_again = glossary_outputs(
            translator, lines, glossary, mode
        )
        for row, out in zip(rows, outputs):
            row[mode] = out
        report["modes"][mode] = {
            "applied_as": applied,
            **mode_figures(outputs, rows, made_up, plain, specs),
            "plain_bleu": report["plain"]["plain_bleu"],
            "sentences_per_s": len(rows) / seconds,
            "plain_sentences_per_s": len(rows) / plain_again,
            "speed_vs_plain": plain_again / seconds,
            "term_stats": stats,
            "fallback_share": fallback_share(stats),
        }
    report["outputs"] = rows
    return report


def swap_oracle(rows: list[dict], plain: list[str], specs: dict) -> dict:
    """What the references' own construction gives when applied to the plain output: on the
    lines whose plain output holds each term's usual translation as often as the reference
    does, the usual words swapped for the terms and repaired by this script's rules; BLEU of
    that against the repaired references beside plain's against the original ones, there."""
    usual_of = {t: u for r in rows for t, u in zip(r["terms"], r.get("usual", []))}
    swapped, where = [], []
    for i, (row, out) in enumerate(zip(rows, plain)):
        if any(t not in usual_of for t in row["terms"]):
            continue  # a row built without usual translations (the learned glossary's)
        injected = injected_pair(out, row["terms"], usual_of)
        if injected is not None:
            swapped.append(repair_reference(injected, {t: specs.get(t, "") for t in row["terms"]}))
            where.append(i)
    refs = [rows[i]["repaired"] for i in where]
    return {
        "lines": len(where),
        "swapped_bleu": score(swapped, refs).bleu if where else None,
        "plain_bleu": score([plain[i] for i in where], [rows[i]["ref"] for i in where]).bleu
        if where
        else None,
        "lines_index": where,
    }


def glossary_outputs(translator, lines: list[str], glossary, mode: str):
    """Outputs with the glossary applied as `mode` says, their median seconds over PASSES
    passes, the mode applied (a run not trained with terms constrains instead of annotating),
    the term counts of the place mode (`Translator.term_stats`: held, placed, fallback) over
    one pass, and the median seconds of the plain passes alternated with them."""
    t, options = translator, translator.options.model_copy(update={"term_mode": mode})
    t.translate_sources(
        t.prepare(lines[:8], options, glossary=glossary), options=options
    )  # warm-up
    runs, plain_runs = [], []
    for _ in range(PASSES):
        plain_runs.append(_timed_plain(translator, lines)[1])
        before = Counter(t.term_stats)
        start = time.perf_counter()
        found = t.translate_sources(t.prepare(lines, options, glossary=glossary), options=options)
        runs.append(time.perf_counter() - start)
        stats = dict(Counter(t.term_stats) - before)
    outputs = [best[0][0] for best in found]
    return (
        outputs,
        statistics.median(runs),
        t.terms.mode(options),
        stats,
        statistics.median(plain_runs),
    )


def _timed_plain(translator, lines: list[str]) -> tuple[list[str], float]:
    """The plain beam's outputs of `lines` and its seconds."""
    start = time.perf_counter()
    out = translator.translate(lines)
    return out, time.perf_counter() - start


def fallback_share(stats: dict) -> float | None:
    """Of the segments with terms the place mode handled (held, placed, or left to the
    constrained beam: `Translator.term_stats`), the share left to the constrained beam."""
    total = sum(stats.get(k, 0) for k in ("held", "placed", "fallback"))
    return stats.get("fallback", 0) / total if total else None


def mode_figures(
    outputs: list[str], rows: list[dict], made_up: set[str], plain: list[str], specs=None
) -> dict:
    """Term use and success, BLEU against the naive, repaired and hand-checked references,
    masked chrF, agreement, window overlap, derailment, and the lines whose plain output held
    their terms: how many came out identical to it."""
    terms, injected = [r["terms"] for r in rows], [r["injected"] for r in rows]
    repaired = [r["repaired"] for r in rows]
    metrics = term_report(outputs, repaired, terms, specs=specs, plains=plain, names=made_up)
    hand = [i for i, r in enumerate(rows) if "checked" in r]
    held = [i for i, (p, ts) in enumerate(zip(plain, terms)) if term_use([p], [ts])["rate"] == 1]
    derailed = metrics["derailment"]
    total = sum(map(len, terms))
    late_at = [i for i, (out, ts) in enumerate(zip(outputs, terms)) if after_final_mark(out, ts)]

    def example(i: int) -> dict:
        return {"src": rows[i]["src"], "repaired": repaired[i], "output": outputs[i]}

    return {
        "term_use": term_use(outputs, terms),
        "term_success": metrics["term_success"],
        "bleu_injected": score(outputs, injected).bleu,
        "bleu_repaired": score(outputs, repaired).bleu,
        "bleu_checked": score([outputs[i] for i in hand], [rows[i]["checked"] for i in hand]).bleu
        if hand
        else None,
        "masked_chrf": metrics["masked_chrf"],
        "agreement": metrics["agreement"],
        "window_overlap": metrics["window_overlap"],
        "derailment": derailed,
        "outputs_with_fragments": derailed["lines_fragments"],
        "after_final_mark": {
            "count": derailed["terms_after_final_mark"],
            "share_of_terms": derailed["terms_after_final_mark"] / total if total else 0.0,
        },
        "held_by_plain": {
            "lines": len(held),
            "identical": sum(outputs[i] == plain[i] for i in held),
        },
        "examples": {"after_final_mark": [example(i) for i in late_at[:10]]},
    }


def table(report: dict) -> str:
    """The rows as a Markdown table: plain, then each term mode; skipped modes noted below."""
    head = (
        "| search | term use | lemma | BLEU naive | BLEU repaired | BLEU checked | masked chrF "
        "| agreement | after final mark | fragments | held = plain | speed | sent/s |"
    )
    lines = [head, "|" + " --- |" * 13]
    for name, m in [("plain", report["plain"])] + list(report["modes"].items()):
        if name != "plain" and m["applied_as"] != name:
            name = f"{name} (as {m['applied_as']})"
        late, held = m["after_final_mark"], m["held_by_plain"]
        checked = "–" if m["bleu_checked"] is None else f"{m['bleu_checked']:.1f}"
        speed = f"{m['speed_vs_plain']:.2f}×" if "speed_vs_plain" in m else "1×"
        lines.append(
            f"| {name} | {m['term_use']['rate']:.1%} | {m['term_success']['lemma']:.1%} "
            f"| {m['bleu_injected']:.1f} | {m['bleu_repaired']:.1f} | {checked} "
            f"| {m['masked_chrf']:.1f} | {m['agreement']['accuracy']:.1%} "
            f"({m['agreement']['checks']}) | {late['count']} ({late['share_of_terms']:.1%}) "
            f"| {m['outputs_with_fragments']} | {held['identical']}/{held['lines']} | {speed} "
            f"| {m['sentences_per_s']:.1f} |"
        )
    p = report["plain"]
    lines.append(
        f"\nplain against the original references: BLEU {p['plain_bleu']:.1f}, chrF with the "
        f"usual translations masked {p['plain_masked_chrf']:.1f}"
    )
    o = report.get("swap_oracle")
    if o and o["lines"]:
        refs = [report["outputs"][i] for i in o["lines_index"]]
        modes = ", ".join(
            f"{mode} {score([r[mode] for r in refs], [r['repaired'] for r in refs]).bleu:.1f}"
            for mode in report["modes"]
        )
        lines.append(
            f"the references' own swap and repair applied to the plain output, on the "
            f"{o['lines']} lines it applies to: BLEU {o['swapped_bleu']:.1f} against the repaired "
            f"references (plain against the original ones there: {o['plain_bleu']:.1f}; {modes})"
        )
    for mode, m in report["modes"].items():
        if m.get("fallback_share") is not None:
            lines.append(
                f"{mode}: {m['fallback_share']:.1%} of the segments with terms left to the "
                f"constrained beam ({m['term_stats']})"
            )
    lines += [f"{mode}: skipped ({why})" for mode, why in report.get("skipped", {}).items()]
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
