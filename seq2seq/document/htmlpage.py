"""HTML: the text of each block (a paragraph, a heading, a list item, a cell…) is a segment, its
inline elements (`<b>`, `<a href>`, `<span>`…) tags; `alt`, `title`, `placeholder` and
`aria-label` values are segments of their own. `<script>`, `<style>`, `<pre>`, `<code>` and
anything marked `translate="no"` are left alone. Only the translated text changes: every other
byte of the page (doctype, attributes, comments, whitespace between blocks) stays as it was.

Read with the standard library's `html.parser`, the tokenizer that reports where each tag and
text run starts in the source, so the page is edited in place rather than re-serialised (a tree
builder such as lxml.html or BeautifulSoup would re-write quoting, entities and structure).
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from seq2seq.document.inline import Pieces, decode, encode
from seq2seq.document.plaintext import splice
from seq2seq.document.segments import Document

INLINE = frozenset(
    "a abbr b bdi bdo big br cite data del dfn em font i img ins label mark nobr q rp rt ruby "
    "s small span strike strong sub sup time tt u wbr".split()
)
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
KEPT_INLINE = frozenset("code kbd samp var".split())  # left alone, inside a sentence
KEPT_BLOCK = frozenset("script style pre textarea template svg math noscript".split())
VALUE = r"""\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+)"""
ATTRIBUTE = re.compile(rf"(?<=\s)(?:alt|title|placeholder|aria-label){VALUE}", re.IGNORECASE)
CONTENT = re.compile(rf"(?<=\s)content{VALUE}", re.IGNORECASE)  # of a <meta> that describes
DESCRIBING = frozenset(
    "description og:title og:description twitter:title twitter:description".split()
)
TEXT = ("data", "entityref", "charref")


class _Events(HTMLParser):
    """Every token of a page as (kind, tag name, attributes, source offset)."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[str, str, dict, int]] = []
        self._lines = [0] + [m.end() for m in re.finditer("\n", source)]
        self.feed(source)
        self.close()

    def _add(self, kind: str, tag: str = "", attrs=()) -> None:
        line, col = self.getpos()
        self.events.append((kind, tag, dict(attrs), self._lines[line - 1] + col))

    def handle_starttag(self, tag, attrs):
        self._add("void" if tag in VOID else "start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("void", tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data")

    def handle_entityref(self, name):
        self._add("entityref")

    def handle_charref(self, name):
        self._add("charref")

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")


def read(data: bytes) -> Document:
    """A page's blocks and translatable attributes."""
    try:
        source, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        source, encoding = data.decode("latin-1"), "latin-1"  # every byte kept as it was
    events = _Events(source).events
    spans = [
        (e[3], events[i + 1][3] if i + 1 < len(events) else len(source))
        for i, e in enumerate(events)
    ]
    page = _Page(source, events, spans)
    page.walk()

    def rebuild(translations: list[str]) -> bytes:
        return page.rebuild(translations).encode(encoding, errors="xmlcharrefreplace")

    return Document(page.segments, rebuild)


class _Page:
    """A page's segments: blocks (a source range and its codes) and attribute values."""

    def __init__(self, source: str, events, spans):
        self.source, self.events, self.spans = source, events, spans
        self.segments: list[str] = []
        self.blocks: list[tuple[int, int, dict]] = []  # (start, end, codes) per segment
        self.attributes: dict[int, list[tuple[int, int, int]]] = {}  # event → (start, end, segment)
        self._items: list[tuple[str, object, int, int]] = []

    def walk(self) -> None:
        """Find the segments, in source order."""
        kept: list = []  # [name, depth, start, inline] of an element left alone, if inside one
        for i, (kind, tag, attrs, _) in enumerate(self.events):
            start, end = self.spans[i]
            if kept:
                self._inside_kept(kept, kind, tag, end)
                continue
            no = attrs.get("translate", "").lower() == "no"
            if kind == "start" and (no or tag in KEPT_BLOCK or tag in KEPT_INLINE):
                inline = tag in INLINE or tag in KEPT_INLINE
                if not inline:
                    self._flush()
                kept[:] = [tag, 1, start, inline]
                continue
            if kind in TEXT:
                self._items.append(("text", None, start, end))
            elif kind == "other":
                self._items.append(("point", None, start, end))
            elif tag in INLINE and not (no and kind == "void"):
                self._attributes(i)
                what = {"start": "open", "end": "close"}.get(kind, "point")
                self._items.append((what, i, start, end))
            elif no:
                self._items.append(("point", None, start, end))
            else:
                self._attributes(i)
                self._flush()
        if kept and kept[3]:
            self._items.append(("point", None, kept[2], len(self.source)))
        self._flush()

    def _inside_kept(self, kept: list, kind: str, tag: str, end: int) -> None:
        if tag == kept[0] and kind in ("start", "end"):
            kept[1] += 1 if kind == "start" else -1
        if kept[1] == 0:
            if kept[3]:  # inline: one point, from its start tag to its end tag
                self._items.append(("point", None, kept[2], end))
            kept.clear()

    def _attributes(self, i: int) -> None:
        """Segments of the translatable attribute values of the start tag of event `i`."""
        if self.events[i][0] not in ("start", "void"):
            return
        start, end = self.spans[i]
        _, tag, attrs, _ = self.events[i]
        found = list(ATTRIBUTE.finditer(self.source, start, end))
        meta = (attrs.get("name") or attrs.get("property") or "").lower()
        if tag == "meta" and meta in DESCRIBING:
            found += CONTENT.finditer(self.source, start, end)
        for m in sorted(found, key=lambda m: m.start()):
            value = html.unescape(m.group(1).strip("\"'"))
            if any(c.isalpha() for c in value):
                self.attributes.setdefault(i, []).append((m.start(1), m.end(1), len(self.segments)))
                self.segments.append(html.escape(value, quote=False))
                self.blocks.append((m.start(1), m.end(1), {}))

    def _flush(self) -> None:
        """The items gathered since the last block boundary as one segment (if it has words)."""
        items, self._items = self._items, []
        while items and items[0][0] == "text" and not self._raw(items[0]).strip():
            items.pop(0)
        while items and items[-1][0] == "text" and not self._raw(items[-1]).strip():
            items.pop()
        if not any(
            k == "text" and any(c.isalpha() for c in html.unescape(self._raw(it)))
            for it in items
            for k in [it[0]]
        ):
            return
        pieces = Pieces()
        for kind, event, start, end in items:
            if kind == "text":
                pieces.text(" ".join(html.unescape(self.source[start:end]).split(" ")))
            else:
                getattr(pieces, kind)((event, start, end))
        segment, codes = encode(pieces)
        first, last = items[0], items[-1]
        start = first[2] + (
            len(self._raw(first)) - len(self._raw(first).lstrip()) if first[0] == "text" else 0
        )
        end = last[3] - (
            len(self._raw(last)) - len(self._raw(last).rstrip()) if last[0] == "text" else 0
        )
        self.segments.append(segment.strip())
        self.blocks.append((start, end, codes))

    def _raw(self, item) -> str:
        return self.source[item[2] : item[3]]

    def rebuild(self, translations: list[str]) -> str:
        """The page with each segment replaced by its translation."""
        values = {}
        for found in self.attributes.values():
            for start, end, k in found:
                values[(start, end)] = (
                    '"' + html.escape(html.unescape(translations[k]), quote=True) + '"'
                )
        edits = []
        for k, (start, end, codes) in enumerate(self.blocks):
            if (start, end) in values:
                if not self._covered(start, end):
                    edits.append((start, end, values[(start, end)]))
                continue
            if translations[k] == self.segments[k] and not any(
                e is not None and e in self.attributes for e, *_ in codes.values()
            ):
                continue  # untranslated: its bytes as they were
            text = {tag: self._tag_text(payload, values) for tag, payload in codes.items()}
            items = decode(translations[k], text)
            edits.append(
                (
                    start,
                    end,
                    "".join(
                        html.escape(v, quote=False) if kind == "text" else v for kind, v in items
                    ),
                )
            )
        return splice(self.source, sorted(edits))

    def _covered(self, start: int, end: int) -> bool:
        """Whether an attribute value sits inside a block segment (written with its tag)."""
        return any(
            a <= start and end <= b and not (a, b) == (start, end) for a, b, c in self.blocks if c
        )

    def _tag_text(self, payload, values: dict) -> str:
        """A tag's source text with its translated attribute values."""
        event, start, end = payload
        found = self.attributes.get(event, []) if event is not None else []
        edits = [(a - start, b - start, values[(a, b)]) for a, b, _ in found]
        return splice(self.source[start:end], edits)
