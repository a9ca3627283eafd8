"""Inline tags and placeholders through translation.

A line's tags (`<b>…</b>`, `<a href="…">…</a>`, self-closing `<br/>`), comments and
placeholders (`{name}`, `{0}`, `%s`, `%(name)s`, `%1$s`) are taken out, the text between them is
translated, and each is put back: a tag pair around the output words aligned to the source words
it wrapped, a self-closing tag or placeholder before the output word aligned to the source word
that followed it (at the start or end if it was there). Tags and placeholders are copied
verbatim, never translated.

A tag pair whose words have no alignment of their own takes the output words between those
aligned to its nearest aligned neighbours (the line's ends where it has none), as a word left
unaligned most often went where its neighbours leave room.

The output is always well-formed with exactly the input's tags: where alignment would make two
tags cross, the inner one is cut to fit inside the outer; a tag whose words a sibling took (both
aligned to one output word) wraps the free word just after them, else just before; and a tag
left with no output word is kept, empty, where its first word would go. Placeholder-shaped
text the model writes itself is dropped (every placeholder of the source was taken out, so such
text is invented). Text is
unescaped (`&amp;` → `&`) for the model and `&`, `<`, `>` escaped in the output. With `html`,
void elements (`<br>`, `<img …>`) need no `/`; with `xml` every tag must close.

Malformed markup (an unclosed, stray or crossing tag) is not guessed at: the line is translated
as plain text, tags and all, and a warning names the line.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from sortedcontainers import SortedList

FORMATS = ("html", "xml")
VOID_ELEMENTS = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)
# Comments are found apart (`_tokens`): a lazy `<!--.*?-->` would scan the rest of the line from
# every `<!--` left open. A tag or placeholder holds no `<` past its first character, so none
# starts before a comment and ends inside it.
COMMENT_OPEN, COMMENT_CLOSE = "<!--", "-->"
TOKEN = re.compile(
    r"(?P<tag></?[A-Za-z][\w:.-]*(?:\s[^<>]*?)?/?>)"
    r"|(?P<placeholder>\{\w*\}|%(?:\(\w+\)|\d+\$)?[sdifx])"
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
    # Words are in order and apart, so both their starts and their ends are sorted: a binary
    # search finds the words around an offset, in time logarithmic in the line's words.
    starts = [m.start() for m in re.finditer(r"\S+", plain)]
    ends = [m.end() for m in re.finditer(r"\S+", plain)]
    marked = Marked(plain, plain.split())

    def words_between(a: int, b: int) -> tuple[int, int]:
        first, last = bisect_right(ends, a), bisect_left(starts, b) - 1
        return (first, last) if first <= last else (1, 0)

    stack: list[tuple[str, str, int, int]] = []  # name, open text, offset, span index
    for kind, text, offset in events:
        if kind == "open":
            parent = stack[-1][3] if stack else None
            before = bisect_left(starts, offset)  # the first word starting at or after it
            marked.spans.append(Span(text, "", 0, -1, len(stack), parent, before))
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
            marked.points.append(Point(text, bisect_left(starts, offset), glued))
    if stack:
        raise MalformedMarkup(f"`{stack[-1][1]}` is never closed")
    return marked


def _split(line: str, fmt: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The line's text (unescaped) and its markup events (kind, text, offset in that text)."""
    plain, events, at = [], [], 0
    size = 0
    for start, end, is_tag in _tokens(line):
        text = html.unescape(line[at:start])
        plain.append(text)
        size += len(text)
        at = end
        token = line[start:end]
        if is_tag:
            closing, void = token.startswith("</"), token.endswith("/>")
            if fmt == "html" and _name(token).lower() in VOID_ELEMENTS and not closing:
                void = True
            kind = "close" if closing else ("point" if void else "open")
        else:
            kind = "point"
        events.append((kind, token, size))
    plain.append(html.unescape(line[at:]))
    return "".join(plain), events


def _tokens(line: str) -> Iterator[tuple[int, int, bool]]:
    """Each comment, tag and placeholder of the line, left to right, as (start, end, is a
    tag): a comment runs from `<!--` to the first `-->` after it; between comments, TOKEN."""
    at, comments = 0, True
    while True:
        start = line.find(COMMENT_OPEN, at) if comments else -1
        end = line.find(COMMENT_CLOSE, start + len(COMMENT_OPEN)) if start >= 0 else -1
        if end < 0:  # no comment closes after here: none opens after here either
            start, comments = -1, False
        for m in TOKEN.finditer(line, at, len(line) if start < 0 else start):
            yield m.start(), m.end(), m.lastgroup == "tag"
        if start < 0:
            return
        at = end + len(COMMENT_CLOSE)
        yield start, at, False


def _name(tag: str) -> str:
    m = TAG_NAME.match(tag)
    return m.group(1) if m else ""


_NONE = float("inf")  # no aligned output word


class _Aligned:
    """Where source words went in the output, for any run of source words at once: each
    word's least and greatest aligned output word in sparse tables (a run's is the least or
    greatest of two overlapping power-of-two runs), and from each word on the first aligned
    one's."""

    def __init__(self, pairs: list[tuple[int, int]], n_src: int, n_tgt: int):
        lows, highs = [_NONE] * n_src, [-_NONE] * n_src
        for i, j in pairs:
            if 0 <= i < n_src:
                lows[i], highs[i] = min(lows[i], j), max(highs[i], j)
        self.lows, self.highs = _sparse_table(lows, min), _sparse_table(highs, max)
        self.following = [n_tgt] * (n_src + 1)  # the first aligned word's least, from each on
        for i in reversed(range(n_src)):
            self.following[i] = lows[i] if lows[i] != _NONE else self.following[i + 1]
        self.preceding = [-1] * (n_src + 1)  # the last aligned word's greatest, before each
        for i in range(n_src):
            self.preceding[i + 1] = highs[i] if highs[i] != -_NONE else self.preceding[i]
        self.n_src, self.n_tgt = n_src, n_tgt

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The output words aligned to any of source words first..last, as (first, last)."""
        if first > last:
            return (1, 0)
        level = (last - first + 1).bit_length() - 1
        other = last - (1 << level) + 1
        low = min(self.lows[level][first], self.lows[level][other])
        if low == _NONE:
            return (1, 0)
        return low, max(self.highs[level][first], self.highs[level][other])

    def between(self, first: int, last: int) -> tuple[int, int]:
        """The output words between those aligned to the nearest aligned source words before
        `first` and after `last` (the line's ends where there are none): where source words
        with no alignment of their own went, by their neighbours' positions."""
        if first > last:
            return (1, 0)
        return self.preceding[first] + 1, self.following[last + 1] - 1

    def position(self, before: int) -> int:
        """Where something that stood before source word `before` goes among the output
        words: before the output of the first following source word that has an alignment."""
        if before <= 0:
            return 0
        if before >= self.n_src:
            return self.n_tgt
        return self.following[before]


def _sparse_table(values: list, pick) -> list[list]:
    """Row k: `pick` of each run of 2**k values (row 0 the values)."""
    table, width = [values], 1
    while 2 * width <= len(values):
        row = table[-1]
        table.append([pick(row[i], row[i + width]) for i in range(len(values) - 2 * width + 1)])
        width *= 2
    return table


def _place(spans: list[Span], aligned: _Aligned) -> list[tuple[int, int]]:
    """Each span's output words (first, last), nested as in the source: a child inside its
    parent, siblings apart (`last < first`: no words)."""
    placed: list[tuple[int, int]] = []
    # The words each parent's children took so far, as (parent, first, last), siblings apart:
    # one sorted list, as a plain list's insert is linear (reversed alignments insert at its
    # front) and a list per parent is garbage for the collector to walk.
    taken = SortedList()
    for span in spans:  # in opening order: a parent is placed before its children
        first, last = aligned.span(span.first, span.last)
        if first > last:  # its words have no alignment: the place their neighbours leave
            first, last = aligned.between(span.first, span.last)
        bounds = (0, aligned.n_tgt - 1) if span.parent is None else placed[span.parent]
        first, last = max(first, bounds[0]), min(last, bounds[1])
        parent = -1 if span.parent is None else span.parent
        part = _free_part(first, last, taken, parent)
        if part[0] > part[1] and first <= last:  # siblings took its words: a free one beside
            part = _beside(first, last, bounds, taken, parent)
        if part[0] <= part[1]:
            taken.add((parent, *part))
        placed.append(part)
    return placed


def _beside(first, last, bounds, taken: SortedList, parent: int) -> tuple[int, int]:
    """The word just after [first, last], else just before, if it is within `bounds` and none
    of `parent`'s children in `taken` covers it: a tag whose words a sibling took (two tags
    aligned to one output word) wraps its neighbour rather than nothing, so a document's run
    keeps its formatting."""
    for w in (last + 1, first - 1):
        k = taken.bisect_right((parent, w, _NONE)) - 1  # the last sibling starting by w
        covered = k >= 0 and taken[k][0] == parent and taken[k][2] >= w
        if bounds[0] <= w <= bounds[1] and not covered:
            return w, w
    return 1, 0


def _free_part(first: int, last: int, taken: SortedList, parent: int) -> tuple[int, int]:
    """The longest run of [first, last] that none of `parent`'s children in `taken` covers,
    the first of the longest; siblings are apart, so sorted by both ends."""
    best, at = (1, 0), first
    k = taken.bisect_left((parent, first))  # the first sibling starting at or after `first`
    if k > 0 and taken[k - 1][0] == parent and taken[k - 1][2] >= first:
        k -= 1  # or the one before, as it reaches into the range
    for owner, start, end in taken.islice(k):
        if owner != parent or start > last:
            break
        if start - 1 - at > best[1] - best[0]:
            best = (at, start - 1)
        at = max(at, end + 1)
        if at > last:
            return best
    if last - at > best[1] - best[0]:
        best = (at, last)
    return best


def reinsert(marked: Marked, target: str, pairs: list[tuple[int, int]]) -> str:
    """The translation `target` (of `marked.text`) with the markup put back; `pairs`: the
    (source word, output word) alignment."""
    words = [html.escape(_invented_removed(w), quote=False) for w in target.split()]
    n_tgt = len(words)
    aligned = _Aligned(pairs, len(marked.words), n_tgt)
    placed = _place(marked.spans, aligned)
    opens: dict[int, list[tuple]] = {}
    closes: dict[int, list[tuple]] = {}
    empty: dict[int, list[str]] = {}  # empty outermost spans at each output word, last first
    inner: list[list[str]] = [[] for _ in marked.spans]  # a span's empty children, last first
    for k in reversed(range(len(marked.spans))):  # children before their parents
        span, (first, last) = marked.spans[k], placed[k]
        opening = span.open + "".join(reversed(inner[k]))  # empty children just inside
        if first > last:  # no aligned word: kept, empty
            if span.parent is not None:
                inner[span.parent].append(opening + span.close)
            else:
                empty.setdefault(aligned.position(span.before), []).append(opening + span.close)
            continue
        opens.setdefault(first, []).append((-last, span.depth, opening))
        closes.setdefault(last + 1, []).append((-first, -span.depth, span.close))
    points = {at: texts[::-1] for at, texts in empty.items()}
    glued: dict[int, list[str]] = {}
    for point in marked.points:
        at = aligned.position(point.before)
        if point.glued and at < n_tgt:
            glued.setdefault(at, []).append(point.text)
        else:
            points.setdefault(at, []).append(point.text)
    out: list[str] = []
    for p in range(n_tgt + 1):
        if p in closes:
            out[-1] += "".join(t for *_, t in sorted(closes[p]))
        out += points.get(p, [])
        if p < n_tgt:
            tags = "".join(t for *_, t in sorted(opens.get(p, [])))
            out.append("".join(glued.get(p, [])) + tags + words[p])
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
