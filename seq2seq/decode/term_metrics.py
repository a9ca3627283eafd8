"""Terminology metrics that see what placing a term does to the sentence around it: text in,
numbers out, no model.

- term success, surface (the term's words as written, case aside, as WMT21's exact match
  lower-cases) and lemma (a light French/English normaliser: lower case, elision split off,
  plural -s/-x/-aux dropped); each glossary occurrence is matched once, longest terms first;
- agreement at each placed term, by French rules: elision both ways (le/la/de/que/ce/je/ne/se
  before a vowel or mute h, l'/d'/qu'… before a consonant), ce/cet, the contractions du/au,
  and the determiner's gender and number against the term's (when the glossary gives them);
- chrF with each term occurrence masked in output and reference (the collateral damage);
- WMT21's window overlap (Alam et al. 2021): the words within ±2 (and ±3) of a term in the
  output against those around it in the reference;
- derailment: length ratio to the plain translation, repeated n-grams (n ≥ 3) the plain one
  does not repeat, terms after the final sentence mark, fragments of a term.
"""

from __future__ import annotations

import re
from collections import Counter
from statistics import mean

from sacrebleu.metrics import CHRF

FINAL_MARKS = ".!?…"
MASK = "■"  # one mask token per term occurrence: a character no reference holds
WINDOWS = (2, 3)
REPEAT_N = 3
LENGTH_BOUNDS = (0.67, 1.5)  # length ratio to plain outside these: a line lost or grown
_VOWEL = "aeiouàâäéèêëîïôöùûüœæ"
# Words whose h is aspirated, or that start with a vowel but refuse elision ("le onze").
_NO_ELISION = {
    "hache", "haie", "haine", "hall", "halte", "hameau", "hamac", "hanche", "handicap",
    "hangar", "hardware", "haricot", "hasard", "hausse", "haut", "haute", "hauteur", "héros",
    "hibou", "hiérarchie", "hockey", "hollande", "homard", "honte", "hors", "hublot", "huit",
    "huitième", "hurlement", "hutte", "onze", "onzième", "oui", "ouate",
}  # fmt: skip
# Words whose h is mute: they take elision ("l'heure"); an h not listed here or above is left
# unjudged.
_MUTE_H = {
    "habitude", "habillage", "harmonie", "hébergement", "hébergeur", "hélice", "herbe",
    "héritage", "heure", "heures", "hexadécimal", "histoire", "historique", "hiver", "homme",
    "hommes", "honneur", "hôpital", "horaire", "horizon", "horloge", "hôte", "hôtel", "huile",
    "humain", "humeur", "hypothèse", "hyperlien", "hyperliens", "hypertexte",
}  # fmt: skip
# Short words after "le", "de"… that are no noun the article goes with ("le ou la", "de a à z").
_NOT_NOUNS = {"à", "a", "ou", "où", "et", "en", "e", "i", "o", "u"}
_ELIDABLE = {"le", "la", "de", "que", "ce", "je", "ne", "se", "me", "te"}
_ELIDED = r"(?<!\w)(l|d|qu|j|n|s|c|m|t|jusqu|lorsqu|puisqu)['’]"
# Determiner → (gender, number); None: either.
_DETERMINERS = {
    "le": ("m", "sg"), "la": ("f", "sg"), "les": (None, "pl"), "l'": (None, "sg"),
    "un": ("m", "sg"), "une": ("f", "sg"), "des": (None, "pl"),
    "ce": ("m", "sg"), "cet": ("m", "sg"), "cette": ("f", "sg"), "ces": (None, "pl"),
    "du": ("m", "sg"), "au": ("m", "sg"), "aux": (None, "pl"),
    "mon": (None, "sg"), "ton": (None, "sg"), "son": (None, "sg"),
    "ma": ("f", "sg"), "ta": ("f", "sg"), "sa": ("f", "sg"),
    "mes": (None, "pl"), "tes": (None, "pl"), "ses": (None, "pl"),
    "notre": (None, "sg"), "votre": (None, "sg"), "leur": (None, "sg"),
    "nos": (None, "pl"), "vos": (None, "pl"), "leurs": (None, "pl"),
    "aucun": ("m", "sg"), "aucune": ("f", "sg"),
    "quel": ("m", "sg"), "quelle": ("f", "sg"), "quels": ("m", "pl"), "quelles": ("f", "pl"),
}  # fmt: skip
_MASCULINE_BEFORE_VOWEL = {"mon", "ton", "son"}  # "mon adresse": no gender check then


def _pattern(term: str) -> re.Pattern:
    """`term` as whole words, any spacing, any case."""
    body = r"\s+".join(map(re.escape, term.split()))
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def words(text: str) -> list[str]:
    """The text's words in lower case (letters and digits; apostrophes and hyphens split)."""
    return re.findall(r"\w+", text.lower())


def lemma(word: str) -> str:
    """A light French/English normaliser: lower case, plural -aux → -al, -s and -x dropped."""
    w = word.lower()
    if len(w) > 4 and w.endswith("aux") and not w.endswith("eaux"):
        return w[:-3] + "al"
    if len(w) > 3 and (w.endswith("x") or (w.endswith("s") and not w.endswith("ss"))):
        return w[:-1]
    return w


def _find(seq: list[str], part: list[str]) -> list[int]:
    """Where `part` starts in `seq`, left to right, occurrences not overlapping."""
    found, at = [], 0
    while part and at + len(part) <= len(seq):
        if seq[at : at + len(part)] == part:
            found.append(at)
            at += len(part)
        else:
            at += 1
    return found


def _matched(text: str, line_terms: list[str]) -> tuple[int, int]:
    """(surface, lemma) matches of a line's terms in `text`, each occurrence once, longest
    terms first, a matched span taken from the text (or the lemmas) for the next terms."""
    surface = lemmas = 0
    masked, tokens = text, [lemma(w) for w in words(text)]
    for term, times in sorted(Counter(line_terms).items(), key=lambda t: -len(t[0])):
        spans = list(_pattern(term).finditer(masked))[:times]
        surface += len(spans)
        for m in reversed(spans):
            masked = masked[: m.start()] + "\0" * len(m.group()) + masked[m.end() :]
        part = [lemma(w) for w in words(term)]
        for at in _find(tokens, part)[:times]:
            tokens[at : at + len(part)] = ["\0"] * len(part)
            lemmas += 1
    return surface, lemmas


def term_success(outputs: list[str], terms: list[list[str]]) -> dict:
    """Share of the glossary's term occurrences the outputs hold, by surface and by lemma."""
    total = sum(map(len, terms))
    surface = lemmas = 0
    for out, line_terms in zip(outputs, terms):
        s, lm = _matched(out, line_terms)
        surface, lemmas = surface + s, lemmas + lm
    return {
        "terms": total,
        "surface": surface / total if total else 1.0,
        "lemma": lemmas / total if total else 1.0,
    }


def features(spec: str | None) -> tuple[str | None, str | None]:
    """A glossary's gender/number column ("m", "f", "pl", "f pl", "m.sg"…) as (gender, number)."""
    parts = set(re.split(r"[\s.,/;]+", (spec or "").lower())) - {""}
    gender = "m" if parts & {"m", "masc", "masculine"} else None
    gender = "f" if parts & {"f", "fem", "feminine"} else gender
    number = "pl" if parts & {"pl", "p", "plural"} else None
    number = "sg" if parts & {"sg", "s", "singular"} else number
    return gender, number


def elision_of(word: str) -> bool | None:
    """Whether a French word takes elision before it ("l'écran", "l'heure": True; "le
    hasard", "le moniteur": False), or None where the rules cannot tell (an h they do not
    know, a y, an acronym, a digit)."""
    w = word.lower()
    if not w or not w[0].isalpha() or w[0] == "y" or (len(word) > 1 and word.isupper()):
        return None
    if w in _NO_ELISION:
        return False
    if w[0] == "h":
        return True if w in _MUTE_H else None
    return w[0] in _VOWEL


def takes_elision(word: str) -> bool:
    """Whether a French word surely takes elision before it (`elision_of`)."""
    return elision_of(word) is True


def elision_errors(text: str) -> list[str]:
    """Elision broken anywhere in a French text: "la écran", "de un" (elision due, ce/cet
    aside), "l'Korvalo", "qu'le" (elided before a consonant); each as its two words."""
    found = []
    for m in re.finditer(r"(?<![\w'’-])(\w+)(?=(\s+)(\w+))", text):
        first, second = m.group(1).lower(), m.group(3)
        after = second.lower()
        if first in _ELIDABLE - {"ce"} and takes_elision(second) and after not in _NOT_NOUNS:
            found.append(m.group(1) + m.group(2) + second)
    for m in re.finditer(_ELIDED + r"(\w+)", text, re.IGNORECASE):
        if elision_of(m.group(2)) is False:
            found.append(m.group())
    return found


def _before(text: str, start: int) -> tuple[str, str]:
    """The word before `start` (an elided article as "l'"), and the one before that."""
    head = text[:start]
    glued = re.search(r"(?<!\w)(\w+)['’]$", head)
    if glued:
        word, head = glued.group(1).lower() + "'", head[: glued.start()]
    else:
        spaced = re.search(r"(?<![\w'’-])(\w+)\s+$", head)
        if not spaced:
            return "", ""
        word, head = spaced.group(1).lower(), head[: spaced.start()]
    prev = re.search(r"(\w+)['’]?\s*$", head)
    return word, prev.group(1).lower() if prev else ""


def _elision_checks(word: str, vowel: bool | None) -> list[tuple[str, bool]]:
    """The checks on the word before a term that depend on how the term starts: elided or
    not, ce/cet, du/au against de l'/à l' (none when the rules cannot tell)."""
    if vowel is None:
        return []
    if word.endswith("'"):
        return [("elision", vowel)]
    if word in _ELIDABLE - {"ce"}:
        return [("elision", not vowel)]
    if word in ("ce", "cet"):
        return [("ce/cet", (word == "cet") == vowel)]
    if word in ("du", "au"):
        return [("contraction", not vowel)]
    return []


def term_checks(text: str, term: str, spec: str | None = None) -> list[tuple[str, bool]]:
    """(kind, passed) of each rule checked at each occurrence of `term` in a French text: the
    elision of the word before it, ce/cet, du/au, and the determiner's gender and number
    against `spec` (the glossary's column)."""
    gender, number = features(spec)
    vowel = elision_of(term.split()[0])
    checks: list[tuple[str, bool]] = []
    for m in _pattern(term).finditer(text):
        word, prev = _before(text, m.start())
        if word.endswith("'") and word != "l'" and word[:-1] not in {"d", "qu", "j", "n", "s"}:
            continue  # "aujourd'", "c'": no article
        checks += _elision_checks(word, vowel)
        if word in ("le", "les") and prev in ("de", "à"):
            checks.append(("contraction", False))  # "de le" → "du", "à les" → "aux"
        if word == "d'":
            continue  # "d'" is a preposition: no determiner
        det_gender, det_number = _DETERMINERS.get(word, (None, None))
        if word in _MASCULINE_BEFORE_VOWEL and vowel is not False:
            det_gender = None
        if word in _DETERMINERS and gender and det_gender:
            checks.append(("gender", gender == det_gender))
        if word in _DETERMINERS and number and det_number:
            checks.append(("number", number == det_number))
    return checks


def agreement(outputs: list[str], terms: list[list[str]], specs: dict | None = None) -> dict:
    """Agreement accuracy at the terms (`term_checks` over every line and term; `specs`: term →
    its gender/number column) and elision broken anywhere in the outputs."""
    specs = specs or {}
    kinds: Counter = Counter()
    failed: Counter = Counter()
    examples = []
    for out, line_terms in zip(outputs, terms):
        for term in dict.fromkeys(line_terms):
            for kind, passed in term_checks(out, term, specs.get(term)):
                kinds[kind] += 1
                if not passed:
                    failed[kind] += 1
                    if len(examples) < 10:
                        examples.append({"kind": kind, "term": term, "output": out})
    checks, failures = sum(kinds.values()), sum(failed.values())
    broken = [e for out in outputs for e in elision_errors(out)]
    return {
        "checks": checks,
        "failures": failures,
        "accuracy": 1 - failures / checks if checks else 1.0,
        "by_kind": {k: {"checks": n, "failures": failed[k]} for k, n in sorted(kinds.items())},
        "elision_errors_anywhere": len(broken),
        "examples": examples,
    }


def mask_terms(text: str, terms: list[str]) -> str:
    """`text` with each occurrence of each term (longest first) replaced by one MASK."""
    for term in sorted(set(terms), key=len, reverse=True):
        text = _pattern(term).sub(MASK, text)
    return text


def masked_chrf(outputs: list[str], references: list[str], terms: list[list[str]]) -> float:
    """Corpus chrF (sacrebleu's) of the outputs against the references, terms masked in both."""
    hyps = [mask_terms(o, ts) for o, ts in zip(outputs, terms)]
    refs = [mask_terms(r, ts) for r, ts in zip(references, terms)]
    return CHRF().corpus_score(hyps, [refs]).score


def _window(tokens: list[str], at: int, length: int, width: int) -> Counter:
    return Counter(tokens[max(0, at - width) : at] + tokens[at + length : at + length + width])


def window_overlap(
    outputs: list[str], references: list[str], terms: list[list[str]], width: int = 2
) -> dict:
    """WMT21's window overlap: for each term found in both output and reference (the k-th
    occurrence in one against the k-th in the other), the share of the reference's words
    within ±`width` of it that are also within ±`width` of it in the output; the mean."""
    scores = []
    for out, ref, line_terms in zip(outputs, references, terms):
        o, r = words(out), words(ref)
        for term in dict.fromkeys(line_terms):
            part = words(term)
            for i, j in zip(_find(o, part), _find(r, part)):
                around = _window(r, j, len(part), width)
                if around:
                    near = _window(o, i, len(part), width)
                    scores.append(sum((near & around).values()) / sum(around.values()))
    return {"width": width, "terms": len(scores), "overlap": mean(scores) if scores else None}


def repeats(text: str, n: int = REPEAT_N) -> int:
    """Word n-gram occurrences beyond each n-gram's first (0: nothing repeated)."""
    tokens = words(text)
    grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return sum(c - 1 for c in grams.values())


def fragments(output: str, term: str, strict: bool = False) -> int:
    """Places where `output` starts `term` and leaves it unfinished, outside its complete
    occurrences: a word start holding a prefix of the term that reaches past the term's first
    word ("bouton-p", "bouton-les" for "bouton-poussoir"); with `strict` (a made-up name, never
    a word of its own), any prefix of 3 or more characters ("Zentr" for "Zentrix")."""
    masked = re.sub(rf"(?<!\w){re.escape(term)}(?!\w)", lambda m: "\0" * len(m.group()), output)
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
        masked = re.sub(rf"(?<!\w){re.escape(term)}(?!\w)", lambda m: "\0" * len(m.group()), masked)
    tail = len(masked)
    while tail and not (masked[tail - 1].isalnum() or masked[tail - 1] == "_"):
        tail -= 1
    marks = [i for i in range(tail, len(masked)) if masked[i] in FINAL_MARKS]
    if not marks:
        return 0
    return len(re.findall(r"\0+", masked[marks[0] :]))


def derailment(
    outputs: list[str],
    terms: list[list[str]],
    plains: list[str] | None = None,
    names: set[str] | None = None,
) -> dict:
    """Lines derailed: length off the plain translation's (LENGTH_BOUNDS), n-grams repeated
    more than in the plain one, terms after the final mark, fragments of terms (`names`, made-up
    names, by default the terms written with a capital: any 3-letter prefix is one)."""
    plains = plains if plains is not None else [None] * len(outputs)
    lines = {"length_off": [], "repeated_ngrams": [], "after_final_mark": [], "fragments": []}
    late = out_words = plain_words = 0
    for i, (out, plain, ts) in enumerate(zip(outputs, plains, terms)):
        strict = names if names is not None else {t for t in ts if t[:1].isupper()}
        if plain is not None:
            n, p = len(words(out)), max(len(words(plain)), 1)
            out_words, plain_words = out_words + n, plain_words + p
            if not LENGTH_BOUNDS[0] <= n / p <= LENGTH_BOUNDS[1]:
                lines["length_off"].append(i)
        if repeats(out) > (repeats(plain) if plain is not None else 0):
            lines["repeated_ngrams"].append(i)
        if after := after_final_mark(out, ts):
            late += after
            lines["after_final_mark"].append(i)
        if any(fragments(out, t, t in strict) for t in set(ts)):
            lines["fragments"].append(i)
    return {
        "length_ratio": out_words / plain_words if plain_words else None,
        **{f"lines_{k}": len(v) for k, v in lines.items()},
        "terms_after_final_mark": late,
        "examples": {k: [outputs[i] for i in v[:5]] for k, v in lines.items() if v},
    }


def term_report(
    outputs: list[str],
    references: list[str],
    terms: list[list[str]],
    *,
    specs: dict | None = None,
    plains: list[str] | None = None,
    names: set[str] | None = None,
) -> dict:
    """Every metric above for outputs, their references and each line's glossary terms."""
    return {
        "term_success": term_success(outputs, terms),
        "agreement": agreement(outputs, terms, specs),
        "masked_chrf": masked_chrf(outputs, references, terms),
        "window_overlap": {str(w): window_overlap(outputs, references, terms, w) for w in WINDOWS},
        "derailment": derailment(outputs, terms, plains, names),
    }


def describe(report: dict) -> list[str]:
    """The term report as a few printed lines."""
    s, a, d = report["term_success"], report["agreement"], report["derailment"]
    windows = ", ".join(
        f"±{w} {o['overlap']:.3f}" if o["overlap"] is not None else f"±{w} –"
        for w, o in report["window_overlap"].items()
    )
    length = (
        f"; length ratio to plain {d['length_ratio']:.2f}, lines off: {d['lines_length_off']}"
        if d["length_ratio"] is not None
        else ""
    )
    return [
        f"term success: surface {100 * s['surface']:.1f}%, lemma {100 * s['lemma']:.1f}% "
        f"of {s['terms']} terms",
        f"agreement at terms: {100 * a['accuracy']:.1f}% of {a['checks']} checks "
        f"({a['failures']} failed); elision broken anywhere: {a['elision_errors_anywhere']}",
        f"chrF2, terms masked = {report['masked_chrf']:.2f}; window overlap {windows}",
        f"derailment: {d['lines_repeated_ngrams']} lines repeat n-grams, "
        f"{d['terms_after_final_mark']} terms after the final mark, "
        f"{d['lines_fragments']} lines with fragments{length}",
    ]
