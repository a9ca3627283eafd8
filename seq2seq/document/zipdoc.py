"""Zip packages (Office Open XML, OpenDocument) opened safely and written back part for part.

An upload is refused before anything is decompressed when it is a CFB file (the container
Office encrypts into), not a zip, encrypted, or a zip bomb: its parts' declared sizes add up to
more than `MAX_RATIO` times the upload (`MIN_TOTAL` bytes at least) or `MAX_TOTAL` bytes.
Reading is bounded by those declared sizes, and zipfile's CRC check refuses a part that
decompresses to anything else. XML is parsed with entities unresolved, no network and no DTD,
and a part with a DOCTYPE is refused outright. Written back, every part keeps its place, its
ZipInfo (name, date, attributes, extra field) and its compression method; a part not rewritten
keeps its content byte for byte (compressed anew: zipfile cannot copy compressed bytes).
A package's text parts become one document, a segment a paragraph (`paragraphs_document`).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from lxml import etree

from seq2seq.document import runs
from seq2seq.document.runs import Flat
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
MAX_RATIO = 100  # office XML compresses about 10×; a bomb by a thousand times or more
MAX_TOTAL = 512 * 1024 * 1024
# Below this, any ratio: deflate packs repeated text a thousand times, and small is harmless.
MIN_TOTAL = 16 * 1024 * 1024
MAX_PARTS = 10_000
CHUNK = 1 << 20


def open_package(data: bytes, kind: str, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The parts of a zip package that `wanted` names, by name in their order; every part is
    checked (its size, its CRC) and UserError raised if the package is not safe to open."""
    if data[:8] == CFB_MAGIC:
        raise UserError(
            f"this {kind} is encrypted (password-protected) or in the old binary format; "
            "save it unprotected in the current format and send it again"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as e:
        raise UserError(f"this {kind} is corrupt: not a readable zip package ({e})") from None
    _check_infos(infos, len(data), kind)
    parts = {}
    try:
        for info in infos:
            # Parts not kept are read through all the same, a chunk at a time: a corrupt one
            # is refused now, not after the translation.
            keep, chunks, size = wanted(info.filename), [], 0
            with archive.open(info) as stream:
                while chunk := stream.read(min(CHUNK, info.file_size - size + 1)):
                    size += len(chunk)
                    if size > info.file_size:
                        break
                    if keep:
                        chunks.append(chunk)
            if size != info.file_size:
                raise zipfile.BadZipFile(f"{info.filename} is not the size it declares")
            if keep:
                parts[info.filename] = b"".join(chunks)
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, RuntimeError) as e:
        raise UserError(f"this {kind} is corrupt: {e}") from None
    return parts


def _check_infos(infos: list[zipfile.ZipInfo], size: int, kind: str) -> None:
    """Refuse encrypted parts, repeated names and sizes that would make a zip bomb."""
    if not infos:
        raise UserError(f"this {kind} is corrupt: an empty zip package")
    if len(infos) > MAX_PARTS:
        raise UserError(f"this {kind} has {len(infos)} parts, more than {MAX_PARTS}")
    if any(info.flag_bits & 0x1 for info in infos):
        raise UserError(f"this {kind} is encrypted; send it without a password")
    if len({info.filename for info in infos}) != len(infos):
        raise UserError(f"this {kind} is corrupt: two parts have the same name")
    total = sum(info.file_size for info in infos)
    limit = min(max(MAX_RATIO * size, MIN_TOTAL), MAX_TOTAL)
    if total > limit:
        raise UserError(
            f"this {kind} would unpack to {total} bytes, more than {limit} "
            f"({MAX_RATIO}× its {size} bytes, at least {MIN_TOTAL}, at most {MAX_TOTAL}): "
            "refused as a zip bomb"
        )


def write_package(data: bytes, replaced: dict[str, bytes]) -> bytes:
    """The package `data` with the parts in `replaced` rewritten, everything else as it was."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename in replaced:
                body = replaced[info.filename]
            else:
                body = source.read(info)
            target.writestr(info, body)
    return out.getvalue()


def parse_xml(body: bytes, name: str, kind: str) -> etree._ElementTree:
    """A part's XML tree, parsed without entities, network or DTD; UserError on a DOCTYPE."""
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        tree = etree.fromstring(body, parser).getroottree()
    except etree.XMLSyntaxError as e:
        raise UserError(f"this {kind} is corrupt: {name} is not well-formed XML ({e})") from None
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise UserError(
            f"this {kind} is refused: {name} declares a DOCTYPE (entities are never expanded)"
        )
    return tree


def serialize_xml(tree: etree._ElementTree) -> bytes:
    """A part's XML written back with its declaration, encoding and standalone flag."""
    info = tree.docinfo
    return etree.tostring(
        tree,
        xml_declaration=True,
        encoding=info.encoding or "UTF-8",
        standalone=info.standalone,
    )


def paragraphs_document(
    data: bytes,
    parts: dict[str, bytes],
    kind: str,
    paragraphs: Callable[[etree._ElementTree, str], Iterator[tuple[Any, Flat]]],
    rebuild: Callable[[Any, Flat, str], None],
) -> Document:
    """The paragraphs of `parts` (text parts, in order) as segments, and a rebuild of the
    package: `paragraphs(tree, name)` yields each paragraph that has text with its content
    flattened, `rebuild(paragraph, flat, translation)` puts a translation in its place."""
    segments, counts = [], []
    for name, body in parts.items():
        found = [runs.segment(flat) for _, flat in paragraphs(parse_xml(body, name, kind), name)]
        segments.extend(found)
        counts.append(len(found))

    def rewrite(name: str, translations: list[str]) -> bytes:
        tree = parse_xml(parts[name], name, kind)
        # Flattened before any is rebuilt: a note's or a text box's paragraphs sit inside
        # another's atoms.
        for (paragraph, flat), translation in zip(list(paragraphs(tree, name)), translations):
            rebuild(paragraph, flat, translation)
        return serialize_xml(tree)

    def rebuild_package(translations: list[str]) -> bytes:
        if len(translations) != len(segments):
            raise ValueError(f"{len(segments)} segments, {len(translations)} translations")
        replaced, at = {}, 0
        for name, count in zip(parts, counts):
            if count:
                replaced[name] = rewrite(name, translations[at : at + count])
            at += count
        return write_package(data, replaced)

    return Document(segments, rebuild_package)
