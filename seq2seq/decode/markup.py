"""Inline tags and placeholders through translation.

A line's tags (`<b>…</b>`, `<a href="…">…</a>`, self-closing `<br/>`), comments and
placeholders (`{name}`, `{0}`, `%s`, `%(name)s`, `%1$s`) are taken out, the text between them is
translated, and each is put back: a tag pair around the output words aligned to the source words
it wrapped, a self-closing tag or placeholder before the output word aligned to the source word
that followed it (at the start or end if it was there). Tags and placeholders are copied
verbatim, never translated.

The output is always well-formed with exactly the input's tags: where alignment would make two
tags cross, the inner one is cut to fit inside the outer, and a tag left with no aligned word is
kept, empty, where its first word would go. Placeholder-shaped text the model writes itself is
dropped (every placeholder of the source was taken out, so such text is invented). Text is
unescaped (`&amp;` → `&`) for the model and `&`, `<`, `>` escaped in the output. With `html`,
void elements (`<br>`, `<img …>`) need no `/`; with `xml` every tag must close.

Malformed markup (an unclosed, stray or crossing tag) is not guessed at: the line is translated
as plain text, tags and all, and a warning names the line.
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

FORMATS = ("html", "xml")
VOID_ELEMENTS = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)
TOKEN = re.compile(
    r"(?P<comment><!--.*?-->)"
    r"|(?P<tag></?[A-Za-z][\w:.-]*(?:\s[^<>]*?)?/?>)"
    r"|(?P<placeholder>\{\w*\}|%(?:\(\w+\)|\d+\$)?[sdifx])",
    re.DOTALL,
)
TAG_NAME = re.compile(r"</?([A-Za-z][\w:.-]*)")
PLACEHOLDER = re.compile(r"\{\w*\}|%(?:\(\w+\)|\d+\$)?[sdifx]")


class MalformedMarkup(ValueError):
    """A line whose tags do not nest: unclosed, closed without opening, or crossing."""


@dataclass
class Span:
    """A tag pair and the words it wraps (`last < first`: it wraps none)."""

    open: str
    close: str
    first: int
    last: int
    depth: int
    parent: int | None  # index of the enclosing span
    before: int  # the word that followed the opening tag


@dataclass
class Point:
    """A self-closing tag, comment, placeholder or empty pair, standing before word `before`."""

    text: str
    before: int
    glued: bool = False  # written against the following text (`{name}.`), and kept so


@dataclass
class Marked:
    """A line's text without markup, its words, and the markup taken out."""

    text: str
    words: list[str]
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)


def parse(line: str, fmt: str = "html") -> Marked:
    """Take the markup out of a line; raise MalformedMarkup if its tags do not nest."""
    if fmt not in FORMATS:
        raise ValueError(f"markup format must be one of {FORMATS}, not {fmt!r}")
    plain, events = _split(line, fmt)
    starts = [m.start() for m in re.finditer(r"\S+", plain)]
    ends = [m.end() for m in re.finditer(r"\S+", plain)]
    marked = Marked(plain, plain.split())

    def words_between(a: int, b: int) -> tuple[int, int]:
        inside = [w for w in range(len(starts)) if starts[w] < b and ends[w] > a]
        return (inside[0], inside[-1]) if inside else (1, 0)

    def next_word(offset: int) -> int:
        return next((w for w in range(len(starts)) if starts[w] >= offset), len(starts))

    stack: list[tuple[str, str, int, int]] = []  # name, open text, offset, span index
    for kind, text, offset in events:
        if kind == "open":
            parent = stack[-1][3] if stack else None
            marked.spans.append(Span(text, "", 0, -1, len(stack), parent, next_word(offset)))
            stack.append((_name(text), text, offset, len(marked.spans) - 1))
        elif kind == "close":
            if not stack or stack[-1][0] != _name(text):
                where = f"`{text}` closes nothing open" if not stack else f"`{text}` crosses"
                raise MalformedMarkup(f"{where} `{stack[-1][1]}`" if stack else where)
            _, _, start, index = stack.pop()
            span = marked.spans[index]
            span.close = text
            span.first, span.last = words_between(start, offset)
        else:
            glued = offset < len(plain) and not plain[offset].isspace()
            marked.points.append(Point(text, next_word(offset), glued))
    if stack:
        raise MalformedMarkup(f"`{stack[-1][1]}` is never closed")
    return marked


def _split(line: str, fmt: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The line's text (unescaped) and its markup events (kind, text, offset in that text)."""
    plain, events, at = [], [], 0
    size = 0
    for m in TOKEN.finditer(line):
        text = html.unescape(line[at : m.start()])
        plain.append(text)
        size += len(text)
        at = m.end()
        token = m.group()
        if m.group("tag"):
            closing, void = token.startswith("</"), token.endswith("/>")
            if fmt == "html" and _name(token).lower() in VOID_ELEMENTS and not closing:
                void = True
            kind = "close" if closing else ("point" if void else "open")
        else:
            kind = "point"
        events.append((kind, token, size))
    plain.append(html.unescape(line[at:]))
    return "".join(plain), events


def _name(tag: str) -> str:
    m = TAG_NAME.match(tag)
    return m.group(1) if m else ""


def target_span(span: Span, pairs: list[tuple[int, int]]) -> tuple[int, int]:
    """The output words aligned to any source word the span wraps, as (first, last)."""
    aligned = [j for i, j in pairs if span.first <= i <= span.last]
    return (min(aligned), max(aligned)) if aligned else (1, 0)


def target_position(before: int, n_src: int, n_tgt: int, pairs: list[tuple[int, int]]) -> int:
    """Where something that stood before source word `before` goes among the output words."""
    if before <= 0:
        return 0
    if before >= n_src:
        return n_tgt
    for i in range(before, n_src):  # the first following source word that has an alignment
        aligned = [j for s, j in pairs if s == i]
        if aligned:
            return min(aligned)
    return n_tgt


def place(marked: Marked, n_tgt: int, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each span's output words (first, last), nested as in the source: a child inside its
    parent, siblings apart (`last < first`: no words)."""
    placed: list[tuple[int, int]] = []
    for span in marked.spans:  # in opening order: a parent is placed before its children
        first, last = target_span(span, pairs)
        if span.parent is not None:
            p_first, p_last = placed[span.parent]
            first, last = max(first, p_first), min(last, p_last)
        taken = [
            placed[k]
            for k, other in enumerate(marked.spans[: len(placed)])
            if other.parent == span.parent and placed[k][0] <= placed[k][1]
        ]
        placed.append(_free_part(first, last, taken))
    return placed


def _free_part(first: int, last: int, taken: list[tuple[int, int]]) -> tuple[int, int]:
    """The longest run of [first, last] that no interval in `taken` covers."""
    best, run_start = (1, 0), None
    for j in range(first, last + 2):
        free = j <= last and not any(a <= j <= b for a, b in taken)
        if free and run_start is None:
            run_start = j
        if not free and run_start is not None:
            if j - 1 - run_start > best[1] - best[0]:
                best = (run_start, j - 1)
            run_start = None
    return best


def reinsert(marked: Marked, target: str, pairs: list[tuple[int, int]]) -> str:
    """The translation `target` (of `marked.text`) with the markup put back; `pairs`: the
    (source word, output word) alignment."""
    words = [html.escape(_invented_removed(w), quote=False) for w in target.split()]
    n_src, n_tgt = len(marked.words), len(words)
    placed = place(marked, n_tgt, pairs)
    opens: dict[int, list[tuple]] = {}
    closes: dict[int, list[tuple]] = {}
    points: dict[int, list[str]] = {}
    inner = [""] * len(marked.spans)  # empty children, kept just inside their parent
    for k in reversed(range(len(marked.spans))):  # children before their parents
        span, (first, last) = marked.spans[k], placed[k]
        if first > last:  # no aligned word: kept, empty
            text = span.open + inner[k] + span.close
            if span.parent is not None:
                inner[span.parent] = text + inner[span.parent]
            else:
                at = target_position(span.before, n_src, n_tgt, pairs)
                points.setdefault(at, []).insert(0, text)
            continue
        opens.setdefault(first, []).append((-last, span.depth, span.open + inner[k]))
        closes.setdefault(last + 1, []).append((-first, -span.depth, span.close))
    glued: dict[int, str] = {}
    for point in marked.points:
        at = target_position(point.before, n_src, n_tgt, pairs)
        if point.glued and at < n_tgt:
            glued[at] = glued.get(at, "") + point.text
        else:
            points.setdefault(at, []).append(point.text)
    out: list[str] = []
    for p in range(n_tgt + 1):
        if p in closes:
            out[-1] += "".join(t for *_, t in sorted(closes[p]))
        out += points.get(p, [])
        if p < n_tgt:
            tags = "".join(t for *_, t in sorted(opens.get(p, [])))
            out.append(glued.get(p, "") + tags + words[p])
    return " ".join(t for t in out if t)


def _invented_removed(word: str) -> str:
    """An output word without placeholder-shaped text: the source's placeholders were all taken
    out, so any the model writes (`{a}`, `%s`) are invented, and would break the caller's
    formatting."""
    while PLACEHOLDER.search(word):
        word = PLACEHOLDER.sub("", word)
    return word


def same_markup(a: str, b: str, fmt: str = "html") -> bool:
    """Whether two lines are well-formed with the same tags and placeholders, in any order."""
    try:
        ma, mb = parse(a, fmt), parse(b, fmt)
    except MalformedMarkup:
        return False
    key = lambda m: sorted([s.open + s.close for s in m.spans] + [p.text for p in m.points])  # noqa: E731
    return key(ma) == key(mb)
