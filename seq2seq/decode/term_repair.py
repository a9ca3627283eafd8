"""The grammar around a placed term, repaired locally by a per-language table: the determiner
before it (gender, number, elision, contraction with "de"/"à") and the adjectives or participles
right after it. Where the table cannot tell (a term of unknown gender, "des" that may be "de
les"), every candidate text is given to `choose`, the model's score, which picks one.

Covered target languages: those in TABLES (French). Any other gets the term replaced only."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from seq2seq.decode import repair_fr

TABLES = {"fr": repair_fr}

Choose = Callable[[list[str]], int]  # candidate texts → the index of the best
Known = Callable[[str], bool]  # whether a word form is one the model knows

_ELIDED_TAIL = re.compile(r"(?<!\w)(\w+)['’]$")
_WORD_TAIL = re.compile(r"(?<!\w)(\w+)(\s+)$")
_PREP_TAIL = re.compile(r"(?<!\w)(de|à|De|À)(\s+)$")
_NEXT_WORD = re.compile(r"\s*([^\W\d_]+)")
NEXT_WORDS = 3  # words after a term looked at for agreement


@dataclass(frozen=True)
class Placed:
    """A sentence with a term put in: the text before it, the term, the text after it; the
    term's gender ('m', 'f' or None: unknown) and number ('sg' or 'pl')."""

    left: str
    term: str
    right: str
    gender: str | None = None
    number: str = "sg"

    @property
    def text(self) -> str:
        """The whole sentence."""
        return self.left + self.term + self.right


def table_for(language: str):
    """The repair table of a target language (its code's first part), or None."""
    return TABLES.get(language.split("_")[0].split("-")[0].lower())


def repaired(placed: Placed, table, choose: Choose, known: Known) -> Placed:
    """The placed term with the determiner before it and the adjectives after it agreeing with
    it (`table`: a language's rules; `choose`: the model's pick among candidates; `known`:
    whether an inflected form is a word the model knows)."""
    if table is None:
        return placed
    lefts = repaired_lefts(placed.left, placed.term, placed.gender, placed.number, table)
    if "’" in placed.text and "'" not in placed.text:  # the sentence's own apostrophe
        lefts = [x.replace("'", "’") for x in lefts]
    if len(lefts) > 1:
        left = lefts[choose([x + placed.term + placed.right for x in lefts])]
    else:
        left = lefts[0]
    was, now = determiner_of(placed.left, table), determiner_of(left, table)
    gender = placed.gender or (now[1] if now else None)
    if gender is None or (was is not None and was[1:] == (gender, placed.number)):
        return replace(placed, left=left)  # nothing says the agreement changed
    pick = choose_in(left, placed.term, choose)
    right = agreeing_right(placed.right, gender, placed.number, table, pick, known)
    return replace(placed, left=left, right=right)


def choose_in(left: str, term: str, choose: Choose) -> Choose:
    """`choose` over candidate right-hand sides, given the text before them."""
    return lambda rights: choose([left + term + r for r in rights])


def determiner_of(left: str, table) -> tuple[str, str | None, str | None] | None:
    """(family, gender, number) of the determiner ending `left`, if one does."""
    m = _ELIDED_TAIL.search(left) or _WORD_TAIL.search(left)
    if m is None:
        return None
    word = m.group(1).lower() + ("'" if m.re is _ELIDED_TAIL else "")
    if word in table.EXPANDED:
        family = table.EXPANDED[word][1]
        return table.FORMS[family][0], table.FORMS[family][1], table.FORMS[family][2]
    return table.FORMS.get(word)


def repaired_lefts(left: str, term: str, gender, number: str, table) -> list[str]:
    """The text before a term with its last word made to fit the term: one candidate, or
    several (gender unknown, an ambiguous form) for the model to choose between."""
    vowel = table.starts_with_vowel(term)
    elided = _ELIDED_TAIL.search(left)
    m = elided or _WORD_TAIL.search(left)
    if m is None:
        return [left]
    word = m.group(1)
    lower = word.lower() + ("'" if elided else "")
    out: list[str] = []
    for head, prep, family in _readings(left[: m.start()], lower, table):
        for g in [gender] if gender else ["m", "f"]:
            written = _written(prep, family, g, number, vowel, table)
            first = prep if prep is not None and head != left[: m.start()] else word
            glue = "" if written.endswith("'") else " "
            out.append(head + _cased(written, first) + glue)
    return list(dict.fromkeys(out)) or [left]


def _readings(head: str, lower: str, table) -> list[tuple[str, str | None, str]]:
    """What the word before a term may be, as (the text before what is rewritten, preposition
    or None, determiner family, or "=word" for a word that only elides, as "de" or "que")."""
    if lower in table.AMBIGUOUS:
        return [(head, prep, family) for prep, family in table.AMBIGUOUS[lower]]
    if lower in table.EXPANDED:
        return [(head, *table.EXPANDED[lower])]
    if lower in table.FORMS:
        before = _PREP_TAIL.search(head)
        if before is None:
            return [(head, None, table.FORMS[lower][0])]
        # "de la", "à l'": the preposition is rewritten too ("du", "au").
        return [(head[: before.start()], before.group(1), table.FORMS[lower][0])]
    bare = {v: k for k, v in table.ELIDED.items()}
    if lower in table.ELIDED or lower in bare:
        return [(head, None, "=" + bare.get(lower, lower))]
    return []


def _written(prep: str | None, family: str, gender: str, number: str, vowel: bool, table) -> str:
    """A determiner (after its preposition, contracted where the language does) for a term."""
    if family.startswith("="):  # a word that only elides: "de" / "d'"
        word = family[1:]
        return table.ELIDED[word] if vowel else word
    m, f, pl, mv, fv = table.FAMILIES[family]
    form = pl if number == "pl" else (mv if vowel else m) if gender == "m" else (fv if vowel else f)
    if prep is None:
        return form
    prep = prep.lower()
    return table.CONTRACTED.get((prep, form), f"{prep} {form}")


def _cased(written: str, was: str) -> str:
    """`written` with the capital the first word it replaces had."""
    return written[:1].upper() + written[1:] if was[:1].isupper() else written


def agreeing_right(
    right: str, gender: str, number: str, table, choose: Choose, known: Known
) -> str:
    """The text after a term with each of its next few words (adjectives, participles) in the
    form the model prefers among its inflections that agree with the term and are known."""
    at = 0
    for _ in range(NEXT_WORDS):
        m = _NEXT_WORD.match(right, at)
        if m is None or m.group(1).lower() in table.FUNCTION_WORDS or m.group(1)[:1].isupper():
            break
        word = m.group(1)
        forms = [word] + sorted(
            f for f in table.inflected(word, gender, number) if f != word and known(f)
        )
        if len(forms) > 1:
            picked = forms[choose([right[: m.start(1)] + f + right[m.end(1) :] for f in forms])]
            right = right[: m.start(1)] + picked + right[m.end(1) :]
            at = m.start(1) + len(picked)
        else:
            at = m.end(1)
    return right
