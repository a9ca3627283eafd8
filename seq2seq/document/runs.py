"""A paragraph's runs as one tagged segment, and a translated segment walked back into runs.

A format module flattens a paragraph into pieces: text with its formatting (a key: the run
properties, the spans it sits in) inside its containers (links, fields, insertions), and atoms
(tabs, breaks, pictures, fields, bookmarks, notes: whatever is kept, not translated). The
segment writes the text; text formatted otherwise than the paragraph's most common formatting
goes inside `<rN>…</rN>`, container N inside `<aN>…</aN>` (a link) or `<cN>…</cN>`, and atom N is
`<xN/>`. Text is XML-escaped, as `markup.parse(text, "xml")` reads it. A translation is read
back token by token: its text goes to the innermost open format (else the common one) inside
the open containers; an atom the translation lost is put at the end, so nothing is dropped.
Atoms before all the text or after it stay there and are left out of the segment.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOKEN = re.compile(r"<(/?)([rac])(\d+)>|<x(\d+)/>")
# Characters XML cannot hold (control characters, lone surrogates): a translation's are dropped.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass
class Piece:
    """Text under format `key`, or atom `atom` (text None), inside containers `links`."""

    text: str | None
    key: int
    links: tuple[int, ...]
    atom: int = -1


@dataclass
class Flat:
    """A paragraph flattened: its pieces and what their indices stand for."""

    pieces: list[Piece] = field(default_factory=list)
    formats: list[Any] = field(default_factory=list)  # the format's own value per key
    keys: dict[str, int] = field(default_factory=dict)
    containers: list[Any] = field(default_factory=list)
    letters: list[str] = field(default_factory=list)  # "a" (a link) or "c" per container
    atoms: list[list[Any]] = field(default_factory=list)

    def text(self, text: str, key: str, value: Any, links: tuple[int, ...]) -> None:
        """Add text under the format named `key` (its value kept the first time)."""
        if not text:
            return
        if key not in self.keys:
            self.keys[key] = len(self.formats)
            self.formats.append(value)
        index = self.keys[key]
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last.text is not None and last.key == index and last.links == links:
            last.text += text
        else:
            self.pieces.append(Piece(text, index, links))

    def atom(self, value: Any, links: tuple[int, ...]) -> None:
        """Add something kept as it is; atoms next to each other make one placeholder."""
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last.text is None and last.links == links:
            self.atoms[last.atom].append(value)
        else:
            self.pieces.append(Piece(None, -1, links, len(self.atoms)))
            self.atoms.append([value])

    def container(self, value: Any, letter: str) -> int:
        """Register a container element; its index goes into the links of what it holds."""
        self.containers.append(value)
        self.letters.append(letter)
        return len(self.containers) - 1

    def has_text(self) -> bool:
        """Whether any piece holds more than white space."""
        return any(p.text is not None and p.text.strip() for p in self.pieces)

    def pinned(self) -> tuple[list[int], list[int]]:
        """The atoms before all the text and after it, outside containers: they stay there,
        out of the segment (a note's number mark, a paragraph's closing bookmark)."""
        edges = []
        for pieces in (self.pieces, self.pieces[::-1]):
            edge = []
            for piece in pieces:
                if piece.text is not None or piece.links:
                    break
                edge.append(piece.atom)
            edges.append(edge)
        return edges[0], edges[1][::-1]

    def common(self) -> int:
        """The key of the format that holds the most characters (the untagged one)."""
        sizes = [0] * len(self.formats)
        for piece in self.pieces:
            if piece.text is not None:
                sizes[piece.key] += len(piece.text)
        return max(range(len(sizes)), key=sizes.__getitem__) if sizes else -1


def segment(flat: Flat) -> str:
    """The paragraph as one segment: escaped text, formats, containers and atoms as tags."""
    common, out, open_links = flat.common(), [], ()
    head, tail = flat.pinned()
    for piece in flat.pieces:
        if piece.text is None and piece.atom in (*head, *tail):
            continue
        keep = _shared(open_links, piece.links)
        for index in reversed(open_links[keep:]):
            out.append(f"</{flat.letters[index]}{index + 1}>")
        for index in piece.links[keep:]:
            out.append(f"<{flat.letters[index]}{index + 1}>")
        open_links = piece.links
        if piece.text is None:
            out.append(f"<x{piece.atom + 1}/>")
        elif piece.key == common:
            out.append(html.escape(piece.text, quote=False))
        else:
            n = piece.key + 1
            out.append(f"<r{n}>{html.escape(piece.text, quote=False)}</r{n}>")
    out.extend(f"</{flat.letters[i]}{i + 1}>" for i in reversed(open_links))
    return "".join(out)


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading containers two paths share."""
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def replay(
    flat: Flat,
    translation: str,
    on_text: Callable[[tuple[int, ...], int, str], None],
    on_atom: Callable[[tuple[int, ...], int], None],
) -> None:
    """Walk a translated segment: text (links, key, text) and atoms (links, index) in order;
    white space the paragraph's text had at either end, the translation has too."""
    head, _ = flat.pinned()
    events = [("atom", (), index) for index in head]
    _read(flat, translation, events, set(head))
    texts = [i for i, event in enumerate(events) if event[0] == "text"]
    source = "".join(p.text for p in flat.pieces if p.text is not None)
    if texts:
        lead, trail = _spaces(source)
        kind, links, key, text = events[texts[0]]
        events[texts[0]] = (kind, links, key, lead + text.lstrip() if lead else text)
        kind, links, key, text = events[texts[-1]]
        events[texts[-1]] = (kind, links, key, text.rstrip() + trail if trail else text)
    for kind, *args in events:
        if kind == "atom":
            on_atom(*args)
        elif args[2]:
            on_text(*args)


def _read(flat: Flat, translation: str, events: list[tuple], used: set[int]) -> None:
    """Add the translation's text and atoms to `events`; atoms it lost, at the end."""
    common, formats, links = flat.common(), [], []

    def text(chunk: str) -> None:
        chunk = NOT_XML.sub("", html.unescape(chunk))
        if chunk:
            events.append(("text", tuple(links), formats[-1] if formats else common, chunk))

    at = 0
    for m in TOKEN.finditer(translation):
        text(translation[at : m.start()])
        at = m.end()
        closing, letter, number, atom = m.groups()
        index = int(atom or number) - 1
        if atom is not None:
            if 0 <= index < len(flat.atoms) and index not in used:
                used.add(index)
                events.append(("atom", tuple(links), index))
        elif letter == "r" and 0 <= index < len(flat.formats):
            _open_or_close(formats, index, closing)
        elif letter != "r" and 0 <= index < len(flat.containers):
            if flat.letters[index] == letter:
                _open_or_close(links, index, closing)
    text(translation[at:])
    events.extend(("atom", (), index) for index in range(len(flat.atoms)) if index not in used)


def _spaces(text: str) -> tuple[str, str]:
    """The white space a text starts and ends with."""
    stripped = text.strip()
    if not stripped:
        return "", ""
    start = text.index(stripped[0])
    return text[:start], text[start + len(stripped) :]


def _open_or_close(stack: list[int], index: int, closing: str) -> None:
    """Open a tag, or close it and whatever opened inside it; a stray close is ignored."""
    if not closing:
        stack.append(index)
    elif index in stack:
        del stack[len(stack) - 1 - stack[::-1].index(index) :]


class Chain:
    """The containers open while a paragraph is rebuilt: copies made as a path asks for them."""

    def __init__(self, root: Any, make: Callable[[Any, int], Any]):
        self.root, self.make = root, make
        self.open: list[tuple[int, Any]] = []

    def parent(self, links: tuple[int, ...]) -> Any:
        """The element text inside `links` goes into, opening fresh containers as needed."""
        keep = _shared(tuple(i for i, _ in self.open), links)
        del self.open[keep:]
        for index in links[keep:]:
            outer = self.open[-1][1] if self.open else self.root
            self.open.append((index, self.make(outer, index)))
        return self.open[-1][1] if self.open else self.root
