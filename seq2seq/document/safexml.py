"""XML read safely: no DTD, no entities, no network, no huge trees; prefixes kept for writing."""

from __future__ import annotations

from defusedxml import DefusedXmlException
from defusedxml import ElementTree as DefusedET
from lxml import etree

from seq2seq.errors import UserError


def parse_xml(data: bytes, what: str = "XML") -> etree._ElementTree:
    """The tree of `data`, or one UserError: malformed, or carrying a DTD or entities (external
    entities and billion-laughs expansion are refused outright, never resolved)."""
    try:
        # defusedxml refuses any DTD or entity declaration before lxml sees the bytes.
        DefusedET.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise UserError(f"{what} with a DTD or entity declarations is refused") from None
    except DefusedET.ParseError as e:
        raise UserError(f"{what} is malformed: {e}") from None
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        return etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as e:
        raise UserError(f"{what} is malformed: {e}") from None


def write_xml(tree: etree._ElementTree, data: bytes) -> bytes:
    """`tree` serialised as its source was: its encoding and its XML declaration, if it had one."""
    declared = data.lstrip().startswith(b"<?xml")
    encoding = tree.docinfo.encoding or "UTF-8"
    return etree.tostring(tree, xml_declaration=declared, encoding=encoding)
