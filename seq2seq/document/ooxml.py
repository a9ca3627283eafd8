"""Office Open XML: .docx (WordprocessingML) and .pptx (DrawingML text), one segment a paragraph.

A paragraph's runs become tags (`runs.py`): a run's properties (`w:rPr`, `a:rPr`, links of a
slide included) are its format, `w:hyperlink`, `w:ins` and `w:fldSimple` are containers, and
whatever a run holds besides text (tabs, breaks, pictures, text boxes, field codes, note
references) is an atom, moved back whole, so a text box's own paragraphs, segments of their own,
come back translated. Parts of a .docx: the body, headers, footers, footnotes, endnotes and
comments; of a .pptx: the slides (their tables too) and their notes. Every other part, and
every paragraph with no text, is left byte for byte.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from lxml import etree

from seq2seq.document import runs, zipdoc
from seq2seq.document.runs import Flat
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
KIND = "Office document"


@dataclass(frozen=True)
class Dialect:
    """The names one vocabulary gives paragraphs, runs and their parts."""

    kind: str
    ns: str
    parts: re.Pattern
    containers: dict[str, str]  # container element → tag letter
    dropped: frozenset[str]  # hints a rebuilt paragraph does without
    tail: frozenset[str]  # children kept last (DrawingML's end-of-paragraph properties)
    unseen: frozenset[str]  # run properties that change no look: runs differing in them merge

    def q(self, name: str) -> str:
        """The qualified name of `name` in this vocabulary."""
        return f"{{{self.ns}}}{name}"


WORD = Dialect(
    kind=".docx",
    ns=W,
    parts=re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml"),
    containers={
        "hyperlink": "a",
        **dict.fromkeys(("ins", "moveTo", "fldSimple", "smartTag", "customXml", "dir", "bdo"), "c"),
    },
    dropped=frozenset({"proofErr", "lastRenderedPageBreak"}),
    tail=frozenset(),
    unseen=frozenset({"lang", "noProof", "specVanish"}),
)
SLIDES = Dialect(
    kind=".pptx",
    ns=A,
    parts=re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml"),
    containers={},
    dropped=frozenset(),
    tail=frozenset({"endParaRPr"}),
    unseen=frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean", "smtId"}),
)


def read(data: bytes) -> Document:
    """Read a .docx or .pptx into its paragraphs' segments and a rebuild of the whole file."""
    parts = zipdoc.open_package(data, KIND, _wanted)
    if "word/document.xml" in parts:
        dialect = WORD
    elif "ppt/presentation.xml" in parts:
        dialect = SLIDES
    else:
        raise UserError(
            "this Office document has neither word/document.xml nor ppt/presentation.xml: "
            "not a .docx or .pptx"
        )
    texts = {name: body for name, body in parts.items() if dialect.parts.fullmatch(name)}
    return zipdoc.paragraphs_document(
        data,
        texts,
        KIND,
        lambda tree, _: _paragraphs(tree, dialect),
        lambda paragraph, flat, translation: _rebuild(paragraph, flat, translation, dialect),
    )


def _wanted(name: str) -> bool:
    """Whether a part holds text to translate, or says which kind of file this is."""
    if name in ("word/document.xml", "ppt/presentation.xml"):
        return True
    return any(dialect.parts.fullmatch(name) for dialect in (WORD, SLIDES))


def _paragraphs(tree, dialect: Dialect):
    """Each paragraph of a part that has text, with its flattened runs, in document order."""
    for paragraph in list(tree.iter(dialect.q("p"))):
        flat = Flat()
        _flatten(paragraph, (), flat, dialect)
        if flat.has_text():
            yield paragraph, flat


def _flatten(parent, links: tuple[int, ...], flat: Flat, dialect: Dialect) -> None:
    """Add a paragraph's (or container's) children to `flat`, in order."""
    for child in parent:
        if not isinstance(child.tag, str):
            flat.atom(child, links)  # a comment or processing instruction
            continue
        local = etree.QName(child).localname if child.tag.startswith("{" + dialect.ns) else ""
        if local in ("pPr", *dialect.tail) or local in dialect.dropped:
            continue
        if local == "r":
            _flatten_run(child, links, flat, dialect)
        elif local in dialect.containers:
            index = flat.container(child, dialect.containers[local])
            _flatten(child, (*links, index), flat, dialect)
        elif local == "sdt" and child.find(dialect.q("sdtContent")) is not None:
            # A content control: its text is translated inside it, its properties kept.
            content = child.find(dialect.q("sdtContent"))
            _flatten(content, (*links, flat.container(content, "c")), flat, dialect)
        else:
            flat.atom(child, links)


def _flatten_run(run, links: tuple[int, ...], flat: Flat, dialect: Dialect) -> None:
    """A run's text under its properties; anything else it holds, an atom with them."""
    props = run.find(dialect.q("rPr"))
    key = _key(props, dialect)
    for child in run:
        if child is props or (isinstance(child.tag, str) and _local(child) in dialect.dropped):
            continue
        if child.tag == dialect.q("t"):
            flat.text(child.text or "", key, props, links)
        else:
            flat.atom((props, child), links)


def _key(props, dialect: Dialect) -> str:
    """Run properties as a key, without the language and spelling marks that split runs."""
    if props is None:
        return ""
    props = copy.deepcopy(props)
    for name in dialect.unseen:
        props.attrib.pop(name, None)
    for child in list(props):
        if isinstance(child.tag, str) and _local(child) in dialect.unseen:
            props.remove(child)
    if not len(props) and not props.attrib:
        return ""
    return etree.tostring(props, encoding="unicode")


def _local(element) -> str:
    """An element's name without its namespace."""
    return etree.QName(element).localname


def _rebuild(paragraph, flat: Flat, translation: str, dialect: Dialect) -> None:
    """Replace a paragraph's runs with the translation's, each with its source run's format."""
    head = [c for c in paragraph if c.tag == dialect.q("pPr")]
    tail = [c for c in paragraph if isinstance(c.tag, str) and _local(c) in dialect.tail]
    for child in list(paragraph):
        paragraph.remove(child)
    paragraph.extend(head)

    chain = runs.Chain(paragraph, lambda outer, index: _container(outer, flat.containers[index]))

    def on_text(links, key, text):
        _add_run(chain.parent(links), flat.formats[key], text, dialect)

    def on_atom(links, index):
        parent = chain.parent(links)
        for item in flat.atoms[index]:
            if isinstance(item, tuple):  # a run's child: back in a run with the run's format
                run = etree.SubElement(parent, dialect.q("r"))
                if item[0] is not None:
                    run.append(copy.deepcopy(item[0]))
                run.append(item[1])
            else:
                parent.append(item)

    runs.replay(flat, translation, on_text, on_atom)
    paragraph.extend(tail)


def _container(outer, source):
    """A fresh copy of container `source` in `outer`, empty for the translation's runs."""
    if etree.QName(source).localname != "sdtContent":
        return etree.SubElement(outer, source.tag, dict(source.attrib))
    control = source.getparent()
    copied = etree.SubElement(outer, control.tag, dict(control.attrib))
    copied.extend(copy.deepcopy(c) for c in control if c is not source)  # its properties
    return etree.SubElement(copied, source.tag, dict(source.attrib))


def _add_run(parent, props, text: str, dialect: Dialect) -> None:
    """Append text to `parent` as a run with a copy of `props`."""
    run = etree.SubElement(parent, dialect.q("r"))
    if props is not None:
        run.append(copy.deepcopy(props))
    t = etree.SubElement(run, dialect.q("t"))
    t.text = text
    if dialect is WORD and (text != text.strip() or "  " in text):
        t.set(XML_SPACE, "preserve")
