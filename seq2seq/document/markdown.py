"""Markdown: each paragraph, heading, list item's text and table cell is a segment; code blocks,
HTML blocks, link destinations, reference definitions, images and inline code stay as they were.

markdown-it-py (the CommonMark parser behind MyST and Jupyter Book, well kept) finds the blocks
and where each begins and ends in the source; only their text is replaced, so every other byte
stays. Inside a block, emphasis (`*`, `**`, `_`, `__`) and link texts become tag pairs and code
spans, images, autolinks, inline HTML and backslash escapes points, each written back verbatim.
A translated paragraph is one line (Markdown reflows it).
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from seq2seq.document.inline import Pieces, decode, encode
from seq2seq.document.plaintext import decode_text, splice
from seq2seq.document.segments import Document

INLINE = re.compile(
    r"(?P<code>(`+)[\s\S]*?[^`]\2(?!`)|(`+)\3(?!`))"  # a code span
    r"|(?P<image>!\[(?:[^\[\]]|\[[^\]]*\])*\](?:\([^)]*\)|\[[^\]]*\])?)"
    r"|(?P<auto><[A-Za-z][\w+.-]{1,31}:[^\s<>]*>|<[^\s<>@]+@[^\s<>]+>)"
    r"|(?P<html></?[A-Za-z][^<>]*>|<!--[\s\S]*?-->)"
    r"|(?P<link>\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]"
    r"(?P<dest>\((?:[^()\s]|\([^()]*\))*(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)|\[[^\]]*\])?)"
    r"|(?P<escape>\\[!-/:-@\[-`{-~])"
    r"|(?P<url>(?:https?|ftp)://[^\s<>]*[^\s<>.,;:!?'\")\]*_])"  # a bare URL, not linked
    r"|(?P<emphasis>\*\*|__|\*|_)"
)


def read(data: bytes) -> Document:
    """A Markdown file's text blocks."""
    source = decode_text(data, "Markdown")
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    ranges, texts = [], []  # (start, end) in the source of each block's text, and the text
    cursor = (-1, 0)  # (line, column) past the last block found: cells share a line
    front = _front_matter(lines)
    for token in MarkdownIt("commonmark").enable("table").parse(source):
        if token.type != "inline" or token.map is None or not token.content.strip():
            continue
        if token.map[0] < front:  # YAML front matter (Jekyll, Hugo, MkDocs): not Markdown
            continue
        found = _located(lines, token.map[0], token.content.split("\n"), cursor)
        if found is not None:
            (l0, c0), (l1, c1) = found
            ranges.append((starts[l0] + c0, starts[l1] + c1))
            texts.append(token.content)  # its lines without a quote's or a list's markers
            cursor = (l1, c1)
    found = [_segment(text) for text in texts]

    def rebuild(translations: list[str]) -> bytes:
        edits = [
            (a, b, "".join(v for _, v in decode(t, codes)))
            for (a, b), (segment, codes), t in zip(ranges, found, translations)
            if t != segment
        ]
        return splice(source, edits).encode("utf-8")

    return Document([segment for segment, _ in found], rebuild)


def _front_matter(lines: list[str]) -> int:
    """How many lines a `---` … `---` YAML block at the top takes (0: none)."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for n, line in enumerate(lines[1:], 2):
        if line.rstrip() in ("---", "..."):
            return n
    return 0


def _located(lines: list[str], first: int, content: list[str], cursor):
    """Where a block's content lines begin and end in the source lines, or None."""
    column = cursor[1] if cursor[0] == first else 0
    c0 = lines[first].find(content[0], column) if first < len(lines) else -1
    last = first + len(content) - 1
    if c0 < 0 or last >= len(lines):
        return None
    c1 = lines[last].find(content[-1], c0 if last == first else 0)
    if c1 < 0:
        return None
    return (first, c0), (last, c1 + len(content[-1]))


def _segment(text: str) -> tuple[str, dict]:
    pieces = Pieces()
    _scan(" ".join(text.split()), pieces)
    return encode(pieces)


def _scan(text: str, pieces: Pieces) -> None:
    """Pieces of inline Markdown: emphasis and link texts as pairs, the rest verbatim."""
    stack: list[str] = []  # emphasis delimiters open
    at = 0
    for m in INLINE.finditer(text):
        pieces.text(text[at : m.start()])
        at = m.end()
        kind = m.lastgroup if m.lastgroup in ("link", "emphasis", "escape") else "verbatim"
        if m.group("link") is not None:
            pieces.open("[")
            _scan(m.group("text"), pieces)
            pieces.close("]" + (m.group("dest") or ""))
        elif m.group("emphasis") is not None:
            _emphasis(text, m, stack, pieces)
        elif kind == "verbatim" or kind == "escape":
            pieces.point(m.group(0))
    pieces.text(text[at:])


def _emphasis(text: str, m: re.Match, stack: list[str], pieces: Pieces) -> None:
    """A delimiter run: closes the emphasis it matches, opens one, or is plain text."""
    delim, before, after = m.group(0), text[m.start() - 1 : m.start()], text[m.end() : m.end() + 1]
    intraword = before.isalnum() and after.isalnum()
    if delim[0] == "_" and intraword:  # snake_case
        pieces.text(delim)
    elif stack and stack[-1] == delim and before and not before.isspace():
        stack.pop()
        pieces.close(delim)
    elif after and not after.isspace():
        stack.append(delim)
        pieces.open(delim)
    else:
        pieces.text(delim)
