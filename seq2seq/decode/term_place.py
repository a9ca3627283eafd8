"""Where a missing term goes in a finished translation, and the term put there: the output span
that translates the source term, found by the term's usual renderings (a lexical table of the
training data, their inflected forms, the source words copied) and the alignment of source and
output words (to choose between occurrences, or alone where no rendering is found), extended
over compounds ("zone de texte", hyphenated words); then replaced by the term, carrying the
sentence-initial capital and the plural of the words it replaces. Pure functions on text."""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"\w+(?:[-‐]\w+)*")
_LINKS = ("de", "d", "du", "des", "à", "en", "pour")  # words inside a French compound
_PLURAL_BEFORE = frozenset("les des ces mes tes ses nos vos leurs aux quels quelles".split())
_FINAL = ".!?…:"
MIN_STEM = 4  # letters two forms must share to count as one word inflected
INSERT_WINDOW = 3  # words either side of where an unaligned term's source sits, tried for it


@dataclass(frozen=True)
class Hit:
    """A glossary term found in a source sentence: its characters, the target term and what
    the glossary says of it (gender 'm'/'f', number 'sg'/'pl'; None: not given)."""

    start: int
    end: int
    target: str
    gender: str | None = None
    number: str | None = None


@dataclass(frozen=True)
class Span:
    """Characters of an output sentence that translate a source term, and its output words."""

    start: int
    end: int
    words: tuple[int, ...]


def words_of(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word of `text`: letters and digits, hyphenated words whole; an
    elided article ("l'") is a word of its own."""
    return [m.span() for m in _WORD.finditer(text)]


def whitespace_index(text: str, at: int) -> int:
    """The number of the whitespace-separated word of `text` holding character `at`."""
    return len(text[:at].split()) - (0 if at == 0 or text[at - 1].isspace() else 1)


def same_word(form: str, rendering: str) -> bool:
    """Whether `form` is `rendering` inflected (case aside): one the prefix of the other, or
    both sharing a stem of MIN_STEM letters and differing in at most three letters each."""
    a, b = form.lower(), rendering.lower()
    if a == b:
        return True
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    return common >= min(MIN_STEM, len(a), len(b)) and max(len(a), len(b)) - common <= 3


def source_words(source: str, hit: Hit) -> list[int]:
    """The whitespace word numbers of a source term's words."""
    first = whitespace_index(source, hit.start)
    return list(range(first, first + len(source[hit.start : hit.end].split())))


def locate(
    output: str,
    source: str,
    hit: Hit,
    renderings: list[str],
    links: set[tuple[int, int]],
    taken: list[tuple[int, int]] = (),
    avoid: list[str] = (),
) -> Span | None:
    """The output span that translates `hit`'s source term: the word that matches one of its
    `renderings` (aligned to the term if several do), else a content word `links` (source word,
    output word) align it to and that is not a rendering of another source word (`avoid`);
    extended over a compound. None when neither finds one."""
    words = words_of(output)
    src = set(source_words(source, hit))
    aligned = {j for i, j in links if i in src}
    best, best_score = None, 0.0
    for k, (s, e) in enumerate(words):
        if any(s < te and ts < e for ts, te in taken):
            continue
        ws = whitespace_index(output, s)
        parts = re.split(r"[-‐]", output[s:e])
        rendered = any(same_word(p, r) for p in parts for r in renderings)
        content = len(output[s:e]) >= 3 and output[s:e].lower() not in _STOP
        content = content and not any(same_word(p, a) for p in parts for a in avoid)
        score = (
            2.0 * rendered + (ws in aligned and content) - 0.01 * _distance(k, words, src, source)
        )
        if (rendered or (ws in aligned and content)) and score > best_score:
            best, best_score = k, score
    if best is None:
        return None
    grow = _Growth(aligned, renderings, avoid, taken)
    return _extended(output, words, best, grow, multiword=len(src) > 1)


def insertion_points(
    output: str, source: str, hit: Hit, links: set[tuple[int, int]], taken=()
) -> list[int]:
    """Where a term whose concept the output dropped may go in (character offsets, each the
    start of a whitespace word, or the end of the last word before its final marks): around
    the words `links` align to the source term, else around where the term sits in the
    source; never first, nor inside a `taken` span (INSERT_WINDOW words either side)."""
    tokens = list(re.finditer(r"\S+", output))
    if not tokens:
        return []
    src = set(source_words(source, hit))
    aligned = sorted({j for i, j in links if i in src and 0 <= j < len(tokens)})
    if aligned:
        near = {k for a in aligned for k in range(a - 1, a + 3)}
    else:
        n_src = max(len(source.split()), 1)
        centre = round(min(src, default=0) / n_src * len(tokens))
        near = set(range(centre - INSERT_WINDOW, centre + INSERT_WINDOW + 1))
    end = len(output.rstrip().rstrip(_FINAL + ";,)»\"'”"))
    ks = [k for k in sorted(near) if 1 <= k <= len(tokens)]
    points = [tokens[k].start() if k < len(tokens) else end for k in ks]
    return [at for at in dict.fromkeys(points) if not any(s < at < e for s, e in taken)]


def _distance(k: int, words, src: set[int], source: str) -> float:
    """How far output word k sits from where the source term sits, as shares of the sentences."""
    n_src = max(len(source.split()), 1)
    where = (min(src) if src else 0) / n_src
    return abs(k / max(len(words), 1) - where)


@dataclass(frozen=True)
class _Growth:
    """What a span may grow over: words aligned to the term or rendering it, not words that
    render another source word (`avoid`), nor words of spans already `taken`."""

    aligned: set[int]
    renderings: list[str]
    avoid: list[str]
    taken: list[tuple[int, int]]

    def belongs(self, output: str, word: tuple[int, int], rendered_only: bool = False) -> bool:
        """Whether output word `word` (its characters) is part of the term's span."""
        s, e = word
        text = output[s:e]
        if text.lower() in _STOP or any(s < te and ts < e for ts, te in self.taken):
            return False
        if any(same_word(text, a) for a in self.avoid):
            return False
        rendered = any(same_word(text, r) for r in self.renderings)
        return rendered or (not rendered_only and whitespace_index(output, s) in self.aligned)


def _extended(output, words, k: int, grow: _Growth, *, multiword: bool) -> Span:
    """Word k's span grown over a compound: a following "de X" / "à X" or a next content word
    whose X renders or aligns to the term (a term of several words: any such X); backwards
    ("zone de" before "texte") over a word aligned to a term of several words ("text box"),
    else only over one that renders it (attention alone took "zone de liste" for "list")."""
    first = last = k
    while last + 2 < len(words) and output[slice(*words[last + 1])].lower() in _LINKS:
        if not grow.belongs(output, words[last + 2]):
            break
        last += 2
    while (
        multiword
        and last + 1 < len(words)
        and grow.belongs(output, words[last + 1])
        and _adjacent(output, words, last)
    ):
        last += 1
    while (
        first >= 2
        and output[slice(*words[first - 1])].lower() in _LINKS
        and grow.belongs(output, words[first - 2], rendered_only=not multiword)
    ):
        first -= 2
    ws = {whitespace_index(output, words[j][0]) for j in range(first, last + 1)}
    return Span(words[first][0], words[last][1], tuple(sorted(ws)))


def _adjacent(output: str, words, j: int) -> bool:
    """Whether words j and j + 1 are separated by spaces only."""
    return output[words[j][1] : words[j + 1][0]].strip() == ""


def is_plural(output: str, span: Span, renderings: list[str]) -> bool:
    """Whether the words a span replaces are plural: a plural determiner before them, or their
    first word a rendering with an added "s"/"x"."""
    before = output[: span.start].split()
    if before and before[-1].lower() in _PLURAL_BEFORE:
        return True
    first = words_of(output[span.start : span.end])[0]
    head = output[span.start + first[0] : span.start + first[1]].lower()
    return any(head in (r + "s", r + "x") for r in renderings if r and r[-1] not in "sx")


def at_sentence_start(output: str, at: int) -> bool:
    """Whether character `at` begins the sentence: nothing but marks before it, or a final mark."""
    before = output[:at].rstrip(" \"'«“(")
    return not any(ch.isalnum() for ch in before) or before[-1:] in _FINAL


def written(term: str, output: str, span: Span, plural: bool, pluralize) -> str:
    """The term as it goes in place of `span`: its first letter capitalised at the start of a
    sentence whose replaced word had one, its first word in the plural (`pluralize`) where the
    replaced words were plural and the term is not a name."""
    if plural and term[:1].islower() and pluralize is not None:
        head, _, rest = term.partition(" ")
        term = " ".join(x for x in (pluralize(head), rest) if x)
    if at_sentence_start(output, span.start) and output[span.start].isupper():
        term = term[:1].upper() + term[1:]
    return term


_STOP = frozenset(
    "le la les un une des de du d l à au aux et ou en dans sur pour par avec ce cet cette ces "
    "son sa ses leur leurs mon ma mes qui que est sont a ne pas se".split()
)
