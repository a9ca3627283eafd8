"""Plain text: each paragraph (lines between blank lines) is a segment; blank lines, the
paragraphs' indentation and the file's line endings are kept."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

from seq2seq.document.segments import Document
from seq2seq.errors import UserError

PARAGRAPH = re.compile(r"\S(?:.*\S)?(?:\r?\n[ \t]*\S.*)*", re.MULTILINE)  # lines, none blank
BOM = "\ufeff"


def decode_text(data: bytes, what: str = "text") -> str:
    """UTF-8 (a byte-order mark kept), or one UserError."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} file is not UTF-8 (byte {e.start}): save it as UTF-8") from None


def read(data: bytes) -> Document:
    """A text file's paragraphs; a translated paragraph is one line (the model reflows it)."""
    text = decode_text(data)
    found = [m for m in PARAGRAPH.finditer(text) if m.group(0).strip(BOM)]
    segments = [html.escape(" ".join(m.group(0).strip(BOM).split()), quote=False) for m in found]

    def rebuild(translations: list[str]) -> bytes:
        starts = [m.start() + m.group(0).startswith(BOM) for m in found]
        edits = zip(starts, (m.end() for m in found), map(html.unescape, translations))
        return splice(text, edits).encode("utf-8")

    return Document(segments, rebuild)


def splice(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """`text` with each range (start, end), in order and apart, replaced by the text given."""
    out, at = [], 0
    for start, end, new in edits:
        out += [text[at:start], new]
        at = end
    return "".join(out) + text[at:]
