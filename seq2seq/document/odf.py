"""OpenDocument: .odt and .odp, one segment a paragraph (`text:p`, `text:h`).

A paragraph's text sits in nested `text:span`s (its format: the chain of spans around it) and
`text:a` links (containers); everything else inside it — spaces `text:s`, tabs, line breaks,
fields, bookmarks, frames (pictures, text boxes), notes, annotations — is an atom, moved back
whole, so a note's or a text box's own paragraphs, segments of their own, come back translated.
Parts: content.xml (the body, tables, frames, notes, slides and speaker notes) and the headers
and footers of styles.xml's master pages; every other part is left byte for byte.
"""

from __future__ import annotations

import re

from lxml import etree

from seq2seq.document import runs, zipdoc
from seq2seq.document.runs import Flat
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
MIMETYPES = (
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.presentation",
)
KIND = "OpenDocument file"
PARAGRAPHS = (f"{{{TEXT}}}p", f"{{{TEXT}}}h")
# Headers and footers of master pages: the rest of styles.xml (a presentation's master slides
# with their placeholder prompts) is not the document's text.
MARGINALS = tuple(
    f"{{{STYLE}}}{side}{page}" for side in ("header", "footer") for page in ("", "-left", "-first")
)
WANTED = frozenset({"mimetype", "META-INF/manifest.xml", "content.xml", "styles.xml"})
SPACES = re.compile(r"[ \t\r\n]+")  # ODF collapses white space in text; text:s spells it out


def read(data: bytes) -> Document:
    """Read an .odt or .odp into its paragraphs' segments and a rebuild of the whole file."""
    parts = zipdoc.open_package(data, KIND, WANTED.__contains__)
    mimetype = parts.get("mimetype", b"").decode("ascii", "replace").strip()
    if mimetype not in MIMETYPES or "content.xml" not in parts:
        raise UserError(
            f"this {KIND} is not a text document or presentation (mimetype {mimetype!r}): "
            "not an .odt or .odp"
        )
    if b"encryption-data" in parts.get("META-INF/manifest.xml", b""):
        raise UserError(f"this {KIND} is encrypted; send it without a password")
    texts = {name: parts[name] for name in ("content.xml", "styles.xml") if name in parts}
    return zipdoc.paragraphs_document(data, texts, KIND, _paragraphs, _rebuild)


def _paragraphs(tree, name: str):
    """Each paragraph of a part that has text, with its flattened content, in document order."""
    roots = [tree.getroot()]
    if name == "styles.xml":
        roots = [e for e in tree.iter(*MARGINALS)]
    for root in roots:
        for paragraph in list(root.iter(*PARAGRAPHS)):
            flat = Flat()
            _flatten(paragraph, (), (), flat)
            if flat.has_text():
                yield paragraph, flat


def _flatten(element, spans: tuple, links: tuple[int, ...], flat: Flat) -> None:
    """Add an element's text and children to `flat`: spans make formats, links containers."""
    _text(element.text, spans, links, flat)
    for child in element:
        if child.tag == f"{{{TEXT}}}span":
            _flatten(child, (*spans, child), links, flat)
        elif child.tag == f"{{{TEXT}}}a":
            _flatten(child, spans, (*links, flat.container(child, "a")), flat)
        elif child.tag != f"{{{TEXT}}}soft-page-break":  # a layout hint, laid out anew
            flat.atom(child, links)
        _text(child.tail, spans, links, flat)


def _text(text: str | None, spans: tuple, links: tuple[int, ...], flat: Flat) -> None:
    """Add text under the chain of spans around it."""
    if text:
        key = "|".join(repr(sorted(span.attrib.items())) for span in spans)
        flat.text(SPACES.sub(" ", text), key, spans, links)


def _rebuild(paragraph, flat: Flat, translation: str) -> None:
    """Replace a paragraph's content with the translation's, each text in its source spans."""
    for child in list(paragraph):
        paragraph.remove(child)
    paragraph.text = None

    def make(outer, index):
        source = flat.containers[index]
        return etree.SubElement(outer, source.tag, dict(source.attrib))

    chain = runs.Chain(paragraph, make)

    def on_text(links, key, text):
        parent = chain.parent(links)
        for span in flat.formats[key]:
            parent = etree.SubElement(parent, span.tag, dict(span.attrib))
        _append_text(parent, text)

    def on_atom(links, index):
        parent = chain.parent(links)
        for element in flat.atoms[index]:
            element.tail = None
            parent.append(element)

    runs.replay(flat, translation, on_text, on_atom)


def _append_text(parent, text: str) -> None:
    """Append text after whatever `parent` holds."""
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text
