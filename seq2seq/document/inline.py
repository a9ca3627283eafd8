"""Inline formatting as the XML-style tags of a segment, and back.

A format module turns a paragraph into pieces: text, the opening and closing of an inline
element (bold, a link), and points (a line break, an image, a placeholder, code left alone),
each carrying whatever the format needs to write it back (its source text, say). `encode`
writes the pieces as a segment `markup.parse(text, "xml")` accepts, pairs as `<gN>…</gN>` and
points as `<xN/>`; `decode` reads a translated segment back into text and those same payloads,
in their new order.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

TAG = re.compile(r"<(/?)([gx])(\d+)(/?)>")


@dataclass
class Pieces:
    """A paragraph being read: ("text", str), ("open", payload), ("close", payload) and
    ("point", payload) in source order."""

    items: list[tuple[str, Any]] = field(default_factory=list)

    def text(self, text: str) -> None:
        """Add text (plain, unescaped)."""
        if text:
            self.items.append(("text", text))

    def open(self, payload: Any) -> None:
        """Open an inline element."""
        self.items.append(("open", payload))

    def close(self, payload: Any) -> None:
        """Close the innermost inline element open."""
        self.items.append(("close", payload))

    def point(self, payload: Any) -> None:
        """Add something that stands alone (a break, an image, a placeholder)."""
        self.items.append(("point", payload))


def encode(pieces: Pieces) -> tuple[str, dict[str, Any]]:
    """The segment of `pieces` and what each of its tags stands for; an element opened and
    not closed in the paragraph (or closed without opening) becomes a point."""
    items = pieces.items
    partner: dict[int, int] = {}
    stack: list[int] = []
    for i, (kind, _) in enumerate(items):
        if kind == "open":
            stack.append(i)
        elif kind == "close" and stack:
            partner[stack.pop()] = i
    closes = set(partner.values())
    out, codes, names = [], {}, {}
    for i, (kind, value) in enumerate(items):
        if kind == "text":
            out.append(html.escape(value, quote=False))
        elif kind == "open" and i in partner:
            n = names[partner[i]] = len(codes) + 1
            codes[f"<g{n}>"] = value
            out.append(f"<g{n}>")
        elif kind == "close" and i in closes:
            tag = f"</g{names[i]}>"
            codes[tag] = value
            out.append(tag)
        else:
            tag = f"<x{len(codes) + 1}/>"
            codes[tag] = value
            out.append(tag)
    return "".join(out), codes


def decode(segment: str, codes: dict[str, Any]) -> list[tuple[str, Any]]:
    """A translated segment as ("text", str) and ("code", payload) items; tags it does not
    know are dropped (the tag machinery writes only the source's)."""
    out: list[tuple[str, Any]] = []
    at = 0
    for m in TAG.finditer(segment):
        if m.start() > at:
            out.append(("text", html.unescape(segment[at : m.start()])))
        if m.group(0) in codes:
            out.append(("code", codes[m.group(0)]))
        at = m.end()
    if at < len(segment):
        out.append(("text", html.unescape(segment[at:])))
    return out
