"""Glossary entries and the files they come in: one term pair a `TermEntry`, with the target
term's gender, number and whether its case is fixed where the file gives them; each entry
checked the same way wherever it comes from (a file, a server's uploaded entries, a request)."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.decode.term_index import has_word_character
from seq2seq.errors import UserError

MAX_TERM_CHARS = 200

# Accepted spellings of a value, folded (lower case), → the value kept. An empty cell is none.
GENDERS = {"m": "m", "masculine": "m", "f": "f", "feminine": "f", "n": "n", "neuter": "n"}
NUMBERS = {"sg": "sg", "singular": "sg", "pl": "pl", "plural": "pl"}
CASE_FIXED = {"yes": True, "y": True, "true": True, "1": True, "x": True, "fixed": True}
CASE_FIXED |= {"no": False, "n": False, "false": False, "0": False}


@dataclass(frozen=True)
class TermEntry:
    """One glossary pair: the source term, its target term, the target term's grammatical
    gender (m, f, n) and number (sg, pl) where known, whether its case is fixed (kept as
    written even where a sentence would capitalise it), and the line it came from (0: none)."""

    source: str
    target: str
    gender: str | None = None
    number: str | None = None
    case_fixed: bool = False
    line: int = 0


def entry_of(item: TermEntry | tuple[str, str]) -> TermEntry:
    """`item` as a TermEntry (a (source, target) pair has no grammar)."""
    return item if isinstance(item, TermEntry) else TermEntry(*item)


def check_side(side: str, term: str, where: str) -> str:
    """`term` with its whitespace collapsed, or an error naming `where`: empty, too long, or
    without a letter or digit (a source term of punctuation alone would match nearly every
    sentence; a target term of it translates nothing)."""
    term = " ".join(term.split())
    if not term:
        raise UserError(f"{where}: the {side} term is empty")
    if len(term) > MAX_TERM_CHARS:
        raise UserError(f"{where}: the {side} term is over {MAX_TERM_CHARS} characters")
    if not has_word_character(term):
        why = "would match nearly every sentence" if side == "source" else "translates nothing"
        raise UserError(
            f"{where}: {side} term {term!r} has no letter or digit; punctuation alone {why}"
        )
    return term


def checked(entry: TermEntry, where: str) -> TermEntry:
    """`entry` with both terms checked (`check_side`) and their whitespace collapsed, and its
    gender and number among the values kept (m/f/n, sg/pl or none), or an error naming `where`."""
    source = check_side("source", entry.source, where)
    target = check_side("target", entry.target, where)
    gender = value_of("gender", entry.gender, GENDERS, where)
    number = value_of("number", entry.number, NUMBERS, where)
    return TermEntry(source, target, gender, number, entry.case_fixed, entry.line)


def value_of(column: str, given: str | None, values: dict, where: str):
    """The kept value of a `column` cell (None when empty), or an error listing the values."""
    if given is None or not given.strip():
        return None
    folded = given.strip().lower()
    if folded not in values:
        names = ", ".join(values)
        raise UserError(f"{where}: {column} {given.strip()!r} is not one of {names}")
    return values[folded]
