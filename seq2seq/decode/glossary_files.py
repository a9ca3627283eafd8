"""Glossary entries and the files they come in: one term pair a `TermEntry`, with the target
term's gender, number and whether its case is fixed where the file gives them; each entry
checked the same way wherever it comes from (a file, a server's uploaded entries, a request).

Files, by extension: `.csv` comma-separated (the csv module: quotes, commas inside quotes),
`.tbx` and `.xml` TBX-Basic (ISO 30042: `<martif>` as Weblate, memoQ and Trados export it, or
`<tbx>`), anything else (`.tsv`, `.txt`) tab-separated. A TSV or CSV file's first row may name
its columns (`COLUMNS`: source, target, gender, number, case); without one a row is
`source, target` or DeepL's `source, target, source_lang, target_lang`.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from seq2seq.decode.glossary_tbx import TbxTerm, pick_languages, read_concepts
from seq2seq.decode.term_index import has_word_character
from seq2seq.errors import UserError

log = logging.getLogger(__name__)

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


# A header row's names, folded (lower case, "_" and "-" as spaces) → the column they name; a
# None column (DeepL's language columns) and a name not listed (Weblate's "context"...) are
# read past.
COLUMNS = {
    "source": "source",
    "src": "source",
    "source term": "source",
    "target": "target",
    "tgt": "target",
    "target term": "target",
    "gender": "gender",
    "number": "number",
    "case": "case",
    "case fixed": "case",
    "source lang": None,
    "target lang": None,
}
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def load_glossary_file(
    path: Path, src_lang: str | None = None, tgt_lang: str | None = None
) -> list[TermEntry]:
    """The checked entries of a glossary file, its format by extension (see the module
    docstring); `src_lang`, `tgt_lang` pick a TBX file's two languages (default: the only two
    it holds). A bad row is one error naming the file and line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read glossary {path}: {e}") from None
    suffix = path.suffix.lower()
    if suffix in (".tbx", ".xml"):
        return read_tbx(data, str(path), src_lang, tgt_lang)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"cannot read glossary {path}: not UTF-8 ({e})") from None
    kind = "csv" if suffix == ".csv" else "tsv"
    return read_rows(text, kind, origin=str(path), header=True, comments=True)


def read_rows(
    text: str, kind: str, *, origin: str, header: bool, comments: bool, row: str = ":"
) -> list[TermEntry]:
    """The checked entries of TSV or CSV text (`kind`), blank rows skipped; with `header`, a
    first row naming columns (`COLUMNS`) is read as such; with `comments`, rows starting with
    `#` are skipped. Errors name `origin` and the line: `{origin}{row}{line}: ...`."""
    columns: list[str | None] | None = None
    entries: list[TermEntry] = []
    first = header  # whether the next row may be a header
    for line, cells in _rows(text, kind, f"{origin}{row}"):
        where = f"{origin}{row}{line}"
        cells = [" ".join(cell.split()) for cell in cells]
        if not any(cells) or (comments and cells[0].startswith("#")):
            continue
        if first:
            first, columns = False, _header(cells)
            if columns is not None:
                continue
        named = _named(cells, columns, kind, where)
        case = value_of("case", named.get("case"), CASE_FIXED, where)
        entry = TermEntry(
            named.get("source", ""),
            named.get("target", ""),
            named.get("gender"),
            named.get("number"),
            bool(case),
            line,
        )
        entries.append(checked(entry, where))
    return entries


def _rows(text: str, kind: str, at: str):
    """Each row's first line number and cells (`at`: errors' prefix before the line)."""
    if kind == "tsv":
        for number, line in enumerate(_LINE_BREAK.split(text), 1):
            yield number, line.split("\t")
        return
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for cells in reader:
            yield start, cells
            start = reader.line_num + 1
    except csv.Error as e:
        raise UserError(f"{at}{reader.line_num}: malformed CSV ({e})") from None


def _header(cells: list[str]) -> list[str | None] | None:
    """The columns a header row names, or None when the row is no header (it names no source
    and target column); names it does not know are read past, with a warning."""
    folded = [re.sub(r"[_-]", " ", cell.lower()) for cell in cells]
    columns = [COLUMNS.get(name) for name in folded]
    if "source" not in columns or "target" not in columns:
        return None
    unknown = [cell for cell, name in zip(cells, folded) if name not in COLUMNS]
    if unknown:
        log.warning("glossary columns %s are not read (known: %s)", unknown, ", ".join(COLUMNS))
    return columns


def _named(cells: list[str], columns: list[str | None] | None, kind: str, where: str) -> dict:
    """A row's cells by column: as the header names them, else source and target (and
    DeepL's two language columns, read past)."""
    if columns is not None:
        if len(cells) > len(columns):
            raise UserError(f"{where}: {len(cells)} columns; the header row names {len(columns)}")
        return {name: cell for name, cell in zip(columns, cells) if name}
    deepl = len(cells) == 4 and all(_LANGUAGE.fullmatch(c) for c in cells[2:])
    if len(cells) == 2 or deepl:
        return {"source": cells[0], "target": cells[1]}
    if kind == "tsv" and len(cells) == 1:
        raise UserError(f"{where}: no tab; each line is `source term<TAB>target term`")
    count = f"{len(cells) - 1} tabs" if kind == "tsv" else f"{len(cells)} columns"
    raise UserError(
        f"{where}: {count}; a row is a source term and a target term (or DeepL's four columns, "
        "the last two language codes); other columns need a header row naming them "
        f"({', '.join(sorted(set(filter(None, COLUMNS.values()))))})"
    )


# TBX's grammatical values beyond those kept ("other", "dual", "mass"): read as none.
TBX_GENDERS = {**GENDERS, "other": None}
TBX_NUMBERS = {**NUMBERS, "other": None, "dual": None, "mass": None}


def read_tbx(
    data: bytes, origin: str, src_lang: str | None = None, tgt_lang: str | None = None
) -> list[TermEntry]:
    """The checked entries of a TBX file: each source-language term of a concept (synonyms
    and deprecated ones too) → the concept's first target-language term not deprecated,
    with that term's gender and number."""
    reader = read_concepts(data, origin)
    src, tgt = pick_languages(reader, src_lang, tgt_lang)
    entries: list[TermEntry] = []
    skipped = 0
    for concept in reader.concepts:
        sources = [t for t in concept if t.lang in src]
        target = next((t for t in concept if t.lang in tgt and not t.deprecated), None)
        if not sources or target is None:
            skipped += 1
            continue
        entries.extend(_tbx_entry(term, target, origin) for term in sources)
    if skipped:
        log.warning("%s: %d entries without a term in each language; skipped", origin, skipped)
    if not entries:
        raise UserError(
            f"{origin}: no entry has a term in both {'/'.join(src)} and {'/'.join(tgt)}"
        )
    return entries


def _tbx_entry(source: TbxTerm, target: TbxTerm, origin: str) -> TermEntry:
    """One checked entry, each error naming the line of what it is about."""
    gender = number = None
    if target.gender is not None:
        gender = value_of("gender", target.gender[0], TBX_GENDERS, f"{origin}:{target.gender[1]}")
    if target.number is not None:
        number = value_of("number", target.number[0], TBX_NUMBERS, f"{origin}:{target.number[1]}")
    return TermEntry(
        check_side("source", source.text, f"{origin}:{source.line}"),
        check_side("target", target.text, f"{origin}:{target.line}"),
        gender,
        number,
        line=source.line,
    )
