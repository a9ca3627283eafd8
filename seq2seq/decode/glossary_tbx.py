"""TBX files read (TBX-Basic, ISO 30042): TBX 2's `<martif>` (termEntry, langSet, tig or ntig)
as Weblate, memoQ and Trados export it, and TBX 3's `<tbx>` (conceptEntry, langSec, termSec);
each concept's terms with their language, line and grammar notes, and which of the file's
languages are the source and the target."""

from __future__ import annotations

import io
import xml.sax
from dataclasses import dataclass

import defusedxml.sax
from defusedxml import DefusedXmlException

from seq2seq.errors import UserError

_CONCEPTS = ("termEntry", "conceptEntry")  # TBX 2 (martif), TBX 3 (tbx)
_LANGUAGES = ("langSet", "langSec")
_TERMS = ("tig", "ntig", "termSec")


@dataclass
class TbxTerm:
    """A term of a TBX file as read: its text, language, line, and the grammar noted on it."""

    lang: str
    line: int
    text: str = ""
    gender: tuple[str, int] | None = None  # the value as written, and its line
    number: tuple[str, int] | None = None
    deprecated: bool = False


class TbxReader(xml.sax.handler.ContentHandler):
    """A TBX file's concepts, each its terms in file order (SAX, for the line numbers)."""

    def __init__(self, origin: str):
        super().__init__()
        self.origin, self.locator = origin, None
        self.root_lang: str | None = None
        self.concepts: list[list[TbxTerm]] = []
        self.lang: str | None = None
        self.term: TbxTerm | None = None
        self.text: list[str] | None = None  # inside <term>
        self.note: tuple[str, list[str], int] | None = None  # inside a <termNote>

    def setDocumentLocator(self, locator) -> None:  # noqa: N802 (SAX's name)
        self.locator = locator

    def where(self) -> str:
        """The file and the line being read."""
        return f"{self.origin}:{self.locator.getLineNumber() if self.locator else 0}"

    def startElement(self, name: str, attrs) -> None:  # noqa: N802
        tag, line = name.rpartition(":")[2], self.locator.getLineNumber()
        if self.root_lang is None:
            if tag not in ("martif", "tbx"):
                raise UserError(
                    f"{self.where()}: not a TBX file: its root element is <{name}>, "
                    "not <martif> or <tbx>"
                )
            self.root_lang = lang_code(attrs.get("xml:lang", ""))
        elif tag in _CONCEPTS:
            self.concepts.append([])
        elif tag in _LANGUAGES:
            self.lang = lang_code(attrs.get("xml:lang", ""))
            if not self.lang:
                raise UserError(f"{self.where()}: <{name}> without xml:lang")
        elif tag in _TERMS and self.lang and self.concepts:
            self.term = TbxTerm(self.lang, line)
        elif tag == "term" and self.term is not None:
            self.text, self.term.line = [], line
        elif tag == "termNote" and self.term is not None:
            self.note = (attrs.get("type", ""), [], line)

    def characters(self, content: str) -> None:
        if self.text is not None:
            self.text.append(content)
        if self.note is not None:
            self.note[1].append(content)

    def endElement(self, name: str) -> None:  # noqa: N802
        tag = name.rpartition(":")[2]
        if tag == "term" and self.text is not None and self.term is not None:
            self.term.text, self.text = "".join(self.text), None
        elif tag == "termNote" and self.note is not None and self.term is not None:
            kind, text, line = self.note
            value = " ".join("".join(text).split())
            if kind == "grammaticalGender":
                self.term.gender = (value, line)
            elif kind == "grammaticalNumber":
                self.term.number = (value, line)
            elif kind in ("administrativeStatus", "normativeAuthorization"):
                self.term.deprecated = value.startswith(("deprecated", "superseded"))
            self.note = None
        elif tag in _TERMS and self.term is not None:
            self.concepts[-1].append(self.term)
            self.term = None
        elif tag in _LANGUAGES:
            self.lang = None


def lang_code(code: str) -> str:
    """A language code as compared: lower case, "-" between its parts."""
    return code.strip().lower().replace("_", "-")


def read_concepts(data: bytes, origin: str) -> TbxReader:
    """The concepts of a TBX file (`origin` names it in errors): malformed XML, another root
    element or entity declarations are one error naming the line."""
    reader = TbxReader(origin)
    parser = defusedxml.sax.make_parser()  # entity declarations refused
    # A DOCTYPE naming an external DTD is allowed (translate-toolkit's TBX, so Weblate's, has
    # one) and never fetched: no external entity of either kind is read.
    parser.forbid_external = False
    parser.setFeature(xml.sax.handler.feature_external_ges, False)
    parser.setFeature(xml.sax.handler.feature_external_pes, False)
    parser.setContentHandler(reader)
    try:
        parser.parse(io.BytesIO(data))
    except xml.sax.SAXParseException as e:
        raise UserError(f"{origin}:{e.getLineNumber()}: not a TBX file: {e.getMessage()}") from None
    except DefusedXmlException:
        raise UserError(f"{origin}: a TBX file with entity declarations is refused") from None
    return reader


def pick_languages(reader: TbxReader, src_lang: str | None, tgt_lang: str | None):
    """The file's language codes taken as source and as target: those given (exactly, else by
    their first part: "en" takes "en-US"), else the only two it holds, the source being the
    file's own xml:lang or else the first written."""
    held = list(dict.fromkeys(t.lang for concept in reader.concepts for t in concept))
    src = matching(held, src_lang, reader.origin) if src_lang else None
    tgt = matching(held, tgt_lang, reader.origin) if tgt_lang else None
    if src is None and tgt is None and len(held) == 2 and reader.root_lang in held:
        src = {reader.root_lang}
    rest = [code for code in held if code not in (src or set()) | (tgt or set())]
    if src is None and len(rest) == (1 if tgt else 2):
        src = {rest[0]}
        rest = rest[1:]
    if tgt is None and len(rest) == 1:
        tgt = {rest[0]}
    if src is None or tgt is None:
        raise UserError(
            f"{reader.origin}: terms in {len(held)} languages ({', '.join(held) or 'none'}); "
            "give the source and target languages (--src-lang, --tgt-lang)"
        )
    return src, tgt


def matching(held: list[str], wanted: str, origin: str) -> set[str]:
    """The codes of `held` that are `wanted`: the same code, else the same first part."""
    code = lang_code(wanted)
    found = {c for c in held if c == code} or {
        c for c in held if c.split("-")[0] == code.split("-")[0]
    }
    if not found:
        raise UserError(f"{origin}: no terms in {wanted!r}; the file holds {', '.join(held)}")
    return found
