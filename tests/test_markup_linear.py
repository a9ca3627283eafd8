"""Taking markup out of a line costs time linear in the line (a server parses every html or xml
request), and takes out exactly what the first, quadratic parser took out: the same text, words,
spans and points, and the same malformed-markup messages."""

from __future__ import annotations

import html
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.decode.markup import MalformedMarkup, Marked, Point, Span, parse, reinsert

# The first parser, kept as the reference: a regex over the whole line, and for every tag and
# placeholder a scan over every word.
_TOKEN = re.compile(
    r"(?P<comment><!--.*?-->)"
    r"|(?P<tag></?[A-Za-z][\w:.-]*(?:\s[^<>]*?)?/?>)"
    r"|(?P<placeholder>\{\w*\}|%(?:\(\w+\)|\d+\$)?[sdifx])",
    re.DOTALL,
)
_TAG_NAME = re.compile(r"</?([A-Za-z][\w:.-]*)")
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


def _name(tag: str) -> str:
    m = _TAG_NAME.match(tag)
    return m.group(1) if m else ""


def _reference_split(line: str, fmt: str) -> tuple[str, list[tuple[str, str, int]]]:
    plain, events, at, size = [], [], 0, 0
    for m in _TOKEN.finditer(line):
        text = html.unescape(line[at : m.start()])
        plain.append(text)
        size += len(text)
        at = m.end()
        token = m.group()
        if m.group("tag"):
            closing, void = token.startswith("</"), token.endswith("/>")
            if fmt == "html" and _name(token).lower() in _VOID and not closing:
                void = True
            kind = "close" if closing else ("point" if void else "open")
        else:
            kind = "point"
        events.append((kind, token, size))
    plain.append(html.unescape(line[at:]))
    return "".join(plain), events


def _reference_parse(line: str, fmt: str) -> Marked:
    plain, events = _reference_split(line, fmt)
    starts = [m.start() for m in re.finditer(r"\S+", plain)]
    ends = [m.end() for m in re.finditer(r"\S+", plain)]
    marked = Marked(plain, plain.split())

    def words_between(a: int, b: int) -> tuple[int, int]:
        inside = [w for w in range(len(starts)) if starts[w] < b and ends[w] > a]
        return (inside[0], inside[-1]) if inside else (1, 0)

    def next_word(offset: int) -> int:
        return next((w for w in range(len(starts)) if starts[w] >= offset), len(starts))

    stack: list[tuple[str, str, int, int]] = []
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


_PLACEHOLDER = re.compile(r"\{\w*\}|%(?:\(\w+\)|\d+\$)?[sdifx]")


def _reference_target_span(span: Span, n_tgt: int, pairs: list[tuple[int, int]]) -> tuple[int, int]:
    aligned = [j for i, j in pairs if span.first <= i <= span.last]
    if aligned:
        return min(aligned), max(aligned)
    if span.first > span.last:
        return (1, 0)
    # No alignment of its own: between its nearest aligned neighbours' output words.
    before = [i for i, _ in pairs if i < span.first]
    after = [i for i, _ in pairs if i > span.last]
    low = max(j for i, j in pairs if i == max(before)) + 1 if before else 0
    high = min(j for i, j in pairs if i == min(after)) - 1 if after else n_tgt - 1
    return low, high


def _reference_target_position(
    before: int, n_src: int, n_tgt: int, pairs: list[tuple[int, int]]
) -> int:
    if before <= 0:
        return 0
    if before >= n_src:
        return n_tgt
    for i in range(before, n_src):  # the first following source word that has an alignment
        aligned = [j for s, j in pairs if s == i]
        if aligned:
            return min(aligned)
    return n_tgt


def _reference_place(
    marked: Marked, n_tgt: int, pairs: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    placed: list[tuple[int, int]] = []
    for span in marked.spans:  # in opening order: a parent is placed before its children
        first, last = _reference_target_span(span, n_tgt, pairs)
        bounds = (0, n_tgt - 1) if span.parent is None else placed[span.parent]
        first, last = max(first, bounds[0]), min(last, bounds[1])
        taken = [
            placed[k]
            for k, other in enumerate(marked.spans[: len(placed)])
            if other.parent == span.parent and placed[k][0] <= placed[k][1]
        ]
        part = _reference_free_part(first, last, taken)
        if part[0] > part[1] and first <= last:  # its words taken: the free word after, or before
            free = [w for w in (last + 1, first - 1) if bounds[0] <= w <= bounds[1]]
            free = [w for w in free if not any(a <= w <= b for a, b in taken)]
            part = (free[0], free[0]) if free else (1, 0)
        placed.append(part)
    return placed


def _reference_free_part(first: int, last: int, taken: list[tuple[int, int]]) -> tuple[int, int]:
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


def _reference_reinsert(marked: Marked, target: str, pairs: list[tuple[int, int]]) -> str:
    words = [html.escape(_reference_invented_removed(w), quote=False) for w in target.split()]
    n_src, n_tgt = len(marked.words), len(words)
    placed = _reference_place(marked, n_tgt, pairs)
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
                at = _reference_target_position(span.before, n_src, n_tgt, pairs)
                points.setdefault(at, []).insert(0, text)
            continue
        opens.setdefault(first, []).append((-last, span.depth, span.open + inner[k]))
        closes.setdefault(last + 1, []).append((-first, -span.depth, span.close))
    glued: dict[int, str] = {}
    for point in marked.points:
        at = _reference_target_position(point.before, n_src, n_tgt, pairs)
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


def _reference_invented_removed(word: str) -> str:
    while _PLACEHOLDER.search(word):
        word = _PLACEHOLDER.sub("", word)
    return word


def _outcome(parser, line: str, fmt: str):
    try:
        return parser(line, fmt)
    except MalformedMarkup as e:
        return ("malformed", str(e))


# Pieces that make tags, comments, placeholders and entities, whole and broken.
PIECES = [
    "<b>",
    "</b>",
    "<i>",
    "</i>",
    "<B >",
    "</b >",
    '<a href="x.html">',
    "</a>",
    "<a\thref=y>",
    "<br>",
    "<br/>",
    "<br />",
    "<img src=x>",
    "<x:y.z-1>",
    "</x:y.z-1>",
    "<é>",
    "<1>",
    "<!--",
    "-->",
    "<!-- c -->",
    "<!---->",
    "<!-->",
    "{name}",
    "{0}",
    "{}",
    "{",
    "}",
    "%s",
    "%d",
    "%(n)s",
    "%1$s",
    "%(",
    "%",
    "$",
    "&amp;",
    "&lt;",
    "&gt;",
    "&nbsp;",
    "&#38;",
    "&",
    "<",
    ">",
    "/",
    "/>",
    " ",
    "  ",
    "\t",
    "\n",
    "\xa0",
    "word",
    "w",
    "Save",
    ".",
    ",",
    "é",
    "中文",
    "e\u0301",
    "_",
]
LINES = st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=30).map("".join)


@settings(max_examples=1500, deadline=None)
@given(line=LINES, fmt=st.sampled_from(["html", "xml"]))
def test_parsing_takes_out_what_the_first_parser_took_out(line, fmt):
    assert _outcome(parse, line, fmt) == _outcome(_reference_parse, line, fmt)


@pytest.mark.parametrize(
    "line",
    [
        "<p>Hello <!-- a <b> --> {name}, <b>w</b>elcome<br></p> <!-- never closed",
        "<a <b>x</b> <i y='<'>z</i> <!---> -->% %(x)s{y}{ z}",
        "<b>one</b> two <i>three <u>four</u></i> &amp; <img src=x> five.",
    ],
)
def test_the_reference_and_the_parser_agree_on_mixed_lines(line):
    for fmt in ("html", "xml"):
        assert _outcome(parse, line, fmt) == _outcome(_reference_parse, line, fmt)


PLAIN = st.sampled_from(
    ["word", "w", " ", "  ", ".", "{x}", "%s", "<br>", "<br/>", "<!-- c -->", "&amp;", "中文", ""]
)


def _element(inner):
    parts = st.tuples(st.sampled_from(["b", "i", "x:y"]), st.lists(inner, max_size=4))
    return parts.map(lambda p: f"<{p[0]}>{''.join(p[1])}</{p[0]}>")


WELL_FORMED = st.lists(st.recursive(PLAIN, _element, max_leaves=24), max_size=6).map("".join)


@st.composite
def _translations(draw):
    """A well-formed line, a translation of some words and a random alignment between them."""
    marked = parse(draw(WELL_FORMED))
    n_src, n_tgt = len(marked.words), draw(st.integers(0, 12))
    words = st.sampled_from(["w", "{x}", "a&b", "%s", "<i>"])
    target = " ".join(draw(words) + str(j) for j in range(n_tgt))
    pair = st.tuples(st.integers(0, max(n_src - 1, 0)), st.integers(0, max(n_tgt - 1, 0)))
    pairs = sorted(set(draw(st.lists(pair, max_size=16)))) if n_src and n_tgt else []
    return marked, target, pairs


@settings(max_examples=1500, deadline=None)
@given(case=_translations())
def test_markup_goes_back_where_the_first_reinsertion_put_it(case):
    marked, target, pairs = case
    assert reinsert(marked, target, pairs) == _reference_reinsert(marked, target, pairs)


def test_markup_goes_back_as_before_around_nested_empty_and_overlapping_spans():
    line = "<p><b>a</b><i>b</i> <u></u>{x}<s>c <em>d</em></s><br>e</p> <i></i>f"
    marked = parse(line)
    for pairs in ([], [(0, 0), (1, 0), (2, 1), (3, 1)], [(4, 0), (0, 2), (2, 2), (3, 0)]):
        target = "x y z"
        assert reinsert(marked, target, pairs) == _reference_reinsert(marked, target, pairs)


def _seconds(work, repeats: int = 3) -> float:
    """The least of a few timings of this process's CPU time: on a loaded machine the others
    are the load's."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "<b>word</b> ",  # a span and its words for every tag
        "{name} word ",  # a point before its next word for every placeholder
        "<!-- x ",  # comment openings never closed: each would scan the rest of the line
        "<a href='x'>",  # opening tags never closed
    ],
)
def test_parsing_eight_times_the_markup_costs_about_eight_times_the_time(unit):
    # Quadratic parsing costs 64 times as much; 20 leaves room for noise. Lines of thousands
    # of tags: below that, the caches of the processor decide.
    small, large = unit * 4000, unit * 32_000

    def parsed(line):
        def work():
            try:
                parse(line, "html")
            except MalformedMarkup:
                pass

        return work

    parsed(small)()  # the first call warms caches
    ratio = _seconds(parsed(large)) / _seconds(parsed(small))
    assert ratio < 20, f"8x the input took {ratio:.1f}x the time"


def test_144_kb_of_tags_is_parsed_and_put_back_in_well_under_a_second():
    line = "<b>word</b> " * 12_000  # 144 kB, 12,000 spans over 12,000 words
    marked = parse(line)
    assert len(marked.spans) == len(marked.words) == 12_000
    assert _seconds(lambda: parse(line), repeats=1) < 1.0
    target = " ".join(marked.words)
    pairs = [(i, i) for i in range(len(marked.words))]
    assert _seconds(lambda: reinsert(marked, target, pairs), repeats=1) < 1.0


@pytest.mark.parametrize(
    "make, backwards",
    [
        (lambda n: "<b>word</b> " * n, False),  # a span over each word
        (lambda n: "<b>word</b> " * n, True),  # aligned in the reverse order
        (lambda n: "<b></b>" * n + " word", False),  # empty spans, kept where they stood
        (lambda n: "<b>" * n + "word " * n + "</b>" * n, False),  # spans within spans
        (lambda n: "{x}" * n + "word " * n, False),  # placeholders glued to one word
    ],
)
def test_putting_back_eight_times_the_markup_costs_about_eight_times_the_time(make, backwards):
    def work(n):
        marked = parse(make(n))
        n_words = len(marked.words)
        target = " ".join(f"w{j}" for j in range(n_words))
        pairs = [(i, n_words - 1 - i if backwards else i) for i in range(n_words)]
        return lambda: reinsert(marked, target, pairs)

    small, large = work(2000), work(16_000)
    small()  # the first call warms caches
    ratio = _seconds(large) / _seconds(small)
    assert ratio < 20, f"8x the markup took {ratio:.1f}x the time"
