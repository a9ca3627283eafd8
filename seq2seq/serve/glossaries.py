"""Glossaries clients upload (DeepL's /v2/glossaries, LibreTranslate's `glossary` field): their
entries read from TSV or CSV, and an in-memory store with a cap."""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from seq2seq.serve.schema import RequestError

MAX_GLOSSARIES = 100
MAX_ENTRIES = 1000  # as many as one native request's glossary may hold


def read_entries(text: str, entries_format: str = "tsv") -> list[tuple[str, str]]:
    """`source<TAB>target` lines (tsv) or `source,target` rows (csv; DeepL's optional language
    columns are allowed), blank lines skipped. A bad row, a repeated source term or too many
    entries is a RequestError (400, field `entries`) naming the row."""
    if entries_format not in ("tsv", "csv"):
        raise RequestError(400, "entries_format", f"entries_format {entries_format!r}: tsv or csv")
    if entries_format == "tsv":
        rows = [line.split("\t") for line in text.splitlines()]
    else:
        try:
            rows = list(csv.reader(io.StringIO(text)))
        except csv.Error as e:
            raise RequestError(400, "entries", f"entries: malformed CSV ({e})") from None
    pairs: dict[str, str] = {}
    for number, row in enumerate(rows, 1):
        if not any(cell.strip() for cell in row):
            continue
        cells = [cell.strip() for cell in row]
        if len(cells) not in (2, 4) or not cells[0] or not cells[1]:
            raise RequestError(
                400,
                "entries",
                f"entries row {number}: expected a source term and a target term "
                f"({'a tab' if entries_format == 'tsv' else 'a comma'} between them)",
            )
        if cells[0] in pairs:
            raise RequestError(400, "entries", f"entries row {number}: source term given twice")
        pairs[cells[0]] = cells[1]
    if not pairs:
        raise RequestError(400, "entries", "entries: no term pairs")
    if len(pairs) > MAX_ENTRIES:
        raise RequestError(
            400, "entries", f"entries: {len(pairs)} term pairs; at most {MAX_ENTRIES}"
        )
    return list(pairs.items())


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


class GlossaryStore:
    """Uploaded glossaries, in this process's memory only, at most `cap` of them."""

    def __init__(self, cap: int = MAX_GLOSSARIES):
        self.cap = cap
        self.glossaries: dict[str, StoredGlossary] = {}

    def add(self, name: str, source: str, target: str, entries: list[tuple[str, str]]):
        """A new glossary, or None when the store is full."""
        if len(self.glossaries) >= self.cap:
            return None
        made = StoredGlossary(
            str(uuid.uuid4()), name, source, target, entries, datetime.now(timezone.utc)
        )
        self.glossaries[made.glossary_id] = made
        return made

    def get(self, glossary_id: str) -> StoredGlossary | None:
        """The glossary of that id, or None."""
        return self.glossaries.get(glossary_id)

    def remove(self, glossary_id: str) -> bool:
        """Whether a glossary of that id was there (and is now gone)."""
        return self.glossaries.pop(glossary_id, None) is not None
