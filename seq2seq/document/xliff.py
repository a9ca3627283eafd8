"""XLIFF 1.2 and 2.x: each source without a translation is a segment; its translation becomes the
target, inline codes kept (1.2: `<g>` pairs, `<x/> <bx/> <ex/> <ph> <bpt> <ept> <it>` points;
2.x: `<pc>` and `<mrk>` pairs, `<ph/> <sc/> <ec/> <cp/>` points), and marked machine-translated
(1.2: `state="needs-review-translation" state-qualifier="mt-suggestion"`; 2.x: the segment's
`state="translated"` with `subState="seq2seq:mt"`). Read with lxml, which keeps namespace
prefixes when it writes, behind the safe parse of safexml.py.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from lxml import etree

from seq2seq.document.inline import Pieces, decode, encode
from seq2seq.document.safexml import parse_xml, write_xml
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

NS_12 = "urn:oasis:names:tc:xliff:document:1.2"
NS_2 = "urn:oasis:names:tc:xliff:document:2.0"
PAIRS = {"g", "pc", "mrk"}


def read(data: bytes) -> Document:
    """An XLIFF file's untranslated sources."""
    tree = parse_xml(data, "XLIFF")
    root = tree.getroot()
    ns = etree.QName(root).namespace
    if etree.QName(root).localname != "xliff" or ns not in (NS_12, NS_2):
        raise UserError("not an XLIFF 1.2 or 2.x file (root <xliff> in the XLIFF namespace)")
    units = list(_untranslated(root, ns))
    found = [_segment(source) for source, *_ in units]

    def rebuild(translations: list[str]) -> bytes:
        _name_target_language(root, ns, document.target_lang)
        for (source, holder, seg), (_, codes), t in zip(units, found, translations):
            target = _target(source, holder, ns) if not seg else _seg_target(source, holder)
            _fill(target, decode(t, codes))
            if ns == NS_12:
                marked = holder.find(f"{{{ns}}}target")
                marked.set("state", "needs-review-translation")
                marked.set("state-qualifier", "mt-suggestion")
            else:
                holder.set("state", "translated")
                holder.set("subState", "seq2seq:mt")
        return write_xml(tree, data)

    document = Document([segment for segment, _ in found], rebuild)
    return document


def _name_target_language(root, ns: str, lang: str) -> None:
    """XLIFF 2 requires `trgLang` once there are targets; 1.2's `target-language` is optional but
    what tools read. A language the file already names is kept."""
    if not lang:
        return
    if ns == NS_2:
        if not root.get("trgLang"):
            root.set("trgLang", lang)
        return
    for file in root.iter(f"{{{ns}}}file"):
        if not file.get("target-language"):
            file.set("target-language", lang)


def _untranslated(root, ns: str) -> Iterator[tuple[etree._Element, etree._Element, bool]]:
    """(source, the element holding it and its target, whether the source is a `<mrk
    mtype="seg">` of a 1.2 `<seg-source>`) of each source with no target text."""
    holder = "trans-unit" if ns == NS_12 else "segment"
    for element in root.iter(f"{{{ns}}}{holder}"):
        if element.get("translate") == "no" or _unit(element, ns).get("translate") == "no":
            continue
        source = element.find(f"{{{ns}}}source")
        target = element.find(f"{{{ns}}}target")
        segmented = element.find(f"{{{ns}}}seg-source")
        if segmented is not None:  # a CAT tool's sentences: each translated in its own mrk
            for mrk in segmented.iter(f"{{{ns}}}mrk"):
                if mrk.get("mtype") == "seg" and not _has_text(_seg_in(target, mrk.get("mid"))):
                    yield mrk, element, True
        elif source is not None and not _has_text(target):
            yield source, element, False


def _has_text(element) -> bool:
    return element is not None and bool("".join(element.itertext()).strip())


def _seg_in(target, mid: str | None):
    """The target's `<mrk mtype="seg">` numbered `mid`, if any."""
    if target is None:
        return None
    for mrk in target.iter(f"{{{NS_12}}}mrk"):
        if mrk.get("mtype") == "seg" and mrk.get("mid") == mid:
            return mrk
    return None


def _seg_target(mrk, unit):
    """The target's mrk of `mrk`'s number, emptied: a missing target is made from the
    seg-source (the space between its sentences kept), a missing mrk appended to it."""
    target = unit.find(f"{{{NS_12}}}target")
    if target is None:
        segmented = unit.find(f"{{{NS_12}}}seg-source")
        target = copy.deepcopy(segmented)
        target.tag = f"{{{NS_12}}}target"
        segmented.addnext(target)
    found = _seg_in(target, mrk.get("mid"))
    if found is None:
        found = etree.SubElement(target, mrk.tag, dict(mrk.attrib))
    found.text = None
    found[:] = []
    return found


def _unit(element, ns: str):
    return element.getparent() if ns == NS_2 and element.getparent() is not None else element


def _segment(source) -> tuple[str, dict]:
    pieces = Pieces()
    _walk(source, pieces)
    return encode(pieces)


def _walk(element, pieces: Pieces) -> None:
    """The text and inline codes inside `element`, in order."""
    pieces.text(element.text or "")
    for child in element:
        if not isinstance(child.tag, str):  # a comment or processing instruction: kept as a point
            pieces.point(_alone(child))
        elif etree.QName(child).localname in PAIRS and not _protected(child):
            shell = copy.copy(child)
            shell[:] = []
            shell.text = shell.tail = None
            pieces.open(shell)
            _walk(child, pieces)
            pieces.close(None)
        else:
            pieces.point(_alone(child))
        pieces.text(child.tail or "")


def _protected(element) -> bool:
    """An annotation whose text is not to be translated (2.x translate="no", 1.2 protected)."""
    return element.get("translate") == "no" or element.get("mtype") == "protected"


def _alone(element):
    out = copy.deepcopy(element)
    out.tail = None
    return out


def _target(source, holder, ns: str):
    """The holder's target, emptied, or a new one right after the source."""
    target = holder.find(f"{{{ns}}}target")
    if target is None:
        target = etree.Element(f"{{{ns}}}target", nsmap=None)
        source.addnext(target)
        target.tail = source.tail
    target.text = None
    target[:] = []
    space = source.get("{http://www.w3.org/XML/1998/namespace}space")
    if space is not None:
        target.set("{http://www.w3.org/XML/1998/namespace}space", space)
    return target


def _fill(target, items: list) -> None:
    """Write decoded items into `target`: text, pairs opened (a copy of the source's) and
    closed (None), points copied."""
    stack, last = [target], None  # `last`: the element whose tail takes the next text

    def add_text(text: str) -> None:
        if last is None:
            stack[-1].text = (stack[-1].text or "") + text
        else:
            last.tail = (last.tail or "") + text

    for kind, value in items:
        if kind == "text":
            add_text(value)
        elif value is None:  # a pair closes
            last = stack.pop() if len(stack) > 1 else last
        else:
            element = copy.deepcopy(value)
            stack[-1].append(element)
            if etree.QName(element).localname in PAIRS and len(element) == 0 and not element.text:
                stack.append(element)
                last = None
            else:
                last = element
