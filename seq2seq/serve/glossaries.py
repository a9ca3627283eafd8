"""Glossaries clients upload (DeepL's /v2/glossaries, LibreTranslate's `glossary` field): their
entries read from TSV or CSV by the parser glossary files go through (`decode.glossary_files`),
checked as decoding will check them, and the glossary kept (stores: glossary_store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.glossary_files import read_rows
from seq2seq.errors import UserError
from seq2seq.serve.schema import RequestError

MAX_GLOSSARIES = 100  # a key's (or, without keys, the server's)
MAX_ENTRIES = 1000  # as many as one native request's glossary may hold


def read_entries(text: str, entries_format: str = "tsv") -> list[tuple[str, str]]:
    """`source<TAB>target` lines (tsv) or `source,target` rows (csv; DeepL's optional language
    columns are allowed), blank lines skipped. A bad row, a repeated source term or too many
    entries is a RequestError (400, field `entries`) naming the row."""
    return [pair for _, pair in _numbered_entries(text, entries_format)]


def glossary_entries(
    text: str, entries_format: str = "tsv", max_chars: int | None = None
) -> list[tuple[str, str]]:
    """The entries of a glossary to keep (DeepL's POST /v2/glossaries): as `read_entries`, and
    refused (400 naming the row) where building the glossary for decoding would refuse them,
    or (413) over `max_chars` term characters, the limit every request that used it would
    hit: so that no glossary is kept that every later use refuses."""
    numbered = _numbered_entries(text, entries_format)
    pairs = [pair for _, pair in numbered]
    chars = sum(len(a) + len(b) for a, b in pairs)
    if max_chars is not None and chars > max_chars:
        raise RequestError(
            413, "entries", f"glossary has {chars} characters in its terms; at most {max_chars}"
        )
    try:
        make_glossary(pairs, [f"entries row {number}" for number, _ in numbered])
    except UserError as e:
        raise RequestError(400, "entries", str(e)) from None
    return pairs


def _numbered_entries(text: str, entries_format: str) -> list[tuple[int, tuple[str, str]]]:
    """Each entry with the number of its row, read as a glossary file's rows are
    (`glossary_files.read_rows`: DeepL's rows, no header, no comments)."""
    if entries_format not in ("tsv", "csv"):
        raise RequestError(400, "entries_format", f"entries_format {entries_format!r}: tsv or csv")
    try:
        rows = read_rows(
            text, entries_format, origin="entries", header=False, comments=False, row=" row "
        )
    except UserError as e:
        raise RequestError(400, "entries", str(e)) from None
    pairs: dict[str, tuple[int, str]] = {}
    for entry in rows:
        if entry.source in pairs:
            raise RequestError(400, "entries", f"entries row {entry.line}: source term given twice")
        pairs[entry.source] = (entry.line, entry.target)
    if not pairs:
        raise RequestError(400, "entries", "entries: no term pairs")
    if len(pairs) > MAX_ENTRIES:
        raise RequestError(
            400, "entries", f"entries: {len(pairs)} term pairs; at most {MAX_ENTRIES}"
        )
    return [(number, (source, target)) for source, (number, target) in pairs.items()]


@dataclass(frozen=True)
class StoredGlossary:
    """A client's glossary: its id, name, language pair, entries and when it was made."""

    glossary_id: str
    name: str
    source_lang: str
    target_lang: str
    entries: list[tuple[str, str]]
    created: datetime

    def info(self) -> dict:
        """DeepL's glossary object."""
        stamp = self.created.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.created.microsecond:06d}Z"
        return {
            "glossary_id": self.glossary_id,
            "name": self.name,
            "ready": True,
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "creation_time": stamp,
            "entry_count": len(self.entries),
        }

    def tsv(self) -> str:
        """The entries as DeepL returns them: one `source<TAB>target` line each."""
        return "".join(f"{a}\t{b}\n" for a, b in self.entries)
