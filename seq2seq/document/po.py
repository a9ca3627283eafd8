"""gettext catalogs (.po, .pot) through polib: each untranslated msgid (and msgid_plural) is a
segment, its translation the msgstr (every plural form), marked `#, fuzzy` for a reviewer.

printf and brace placeholders (`%s`, `%(name)s`, `%1$d`, `{0}`), `&` accelerators and line
breaks are inline points: the model never sees them and they come back exactly. Unnamed printf
directives come back in their source order (msgfmt --check compares them in order).
"""

from __future__ import annotations

import re

import polib

from seq2seq.document.inline import Pieces, decode, encode
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

PRINTF = (
    r"%(?:\d+\$|\([^)]*\))?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspr%]"
)
CODE = re.compile(rf"{PRINTF}|\{{[^{{}}\s]*\}}|&(?=\w)|\n")
UNNAMED = re.compile(r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?[a-zA-Z]*[diouxXeEfFgGaAcspr]")


def read(data: bytes) -> Document:
    """A catalog's untranslated messages; the header and translated entries stay as they are."""
    catalog = _catalog(data)
    entries = [e for e in catalog if not e.obsolete and e.msgid and not e.translated()]
    nplurals = _nplurals(catalog)
    segments, codes = [], []
    for entry in entries:
        for text in [entry.msgid] + ([entry.msgid_plural] if entry.msgid_plural else []):
            segment, code = _segment(text)
            segments.append(segment)
            codes.append(code)

    def rebuild(translations: list[str]) -> bytes:
        it = iter(zip(translations, codes))
        for entry in entries:
            singular = _text(*next(it))
            if entry.msgid_plural:
                plural = _text(*next(it))
                entry.msgstr_plural = {0: singular, **{n: plural for n in range(1, nplurals)}}
            else:
                entry.msgstr = singular
            if "fuzzy" not in entry.flags:
                entry.flags.insert(0, "fuzzy")
        return catalog.__unicode__().encode(catalog.encoding or "utf-8")

    return Document(segments, rebuild)


def _catalog(data: bytes) -> polib.POFile:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        charset = re.search(rb"charset=([\w-]+)", data)
        try:
            text = data.decode(charset.group(1).decode() if charset else "latin-1")
        except (LookupError, UnicodeDecodeError):
            raise UserError("gettext catalog: cannot decode it (charset?)") from None
    if "\n" not in text.strip():  # polib would take one line for a path, and read that file
        raise UserError("not a gettext catalog: no messages")
    try:
        catalog = polib.pofile(text, wrapwidth=78)
    except (OSError, ValueError) as e:
        raise UserError(f"not a gettext catalog: {e}") from None
    if not len(catalog) and not catalog.metadata:
        raise UserError("not a gettext catalog: no messages")
    return catalog


def _nplurals(catalog: polib.POFile) -> int:
    found = re.search(r"nplurals\s*=\s*(\d+)", catalog.metadata.get("Plural-Forms", ""))
    return int(found.group(1)) if found else 2


def _segment(text: str) -> tuple[str, dict]:
    """A message as a segment: its placeholders, accelerators and line breaks as points."""
    pieces, at = Pieces(), 0
    for m in CODE.finditer(text):
        pieces.text(text[at : m.start()])
        pieces.point(m.group(0))
        at = m.end()
    pieces.text(text[at:])
    return encode(pieces)


def _text(translation: str, codes: dict) -> str:
    """A translated segment as a message; unnamed printf directives in their source order."""
    items = decode(translation, codes)
    source_order = [v for v in codes.values() if UNNAMED.fullmatch(v) and v != "%%"]
    directives = iter(source_order)
    out = []
    for kind, value in items:
        if kind == "code" and UNNAMED.fullmatch(value) and value != "%%":
            value = next(directives)
        out.append(value)
    return "".join(out)
