"""Subtitles (.srt, .vtt): each cue's text is a segment; numbers, timings, cue settings, the
WebVTT header and NOTE/STYLE/REGION blocks stay byte for byte. A translated cue is re-wrapped
over as many lines as it had, balanced; inline tags (`<i>`, `<b>`, `<font …>`, `<c.x>`,
`<v Name>`, timestamps) are kept.

Cue blocks are simple enough to split by hand, which keeps every byte outside the cue text as
it was (the `srt` and `webvtt-py` libraries re-write timings in their own form).
"""

from __future__ import annotations

import html
import re

from seq2seq.document.inline import Pieces, decode, encode
from seq2seq.document.plaintext import decode_text, splice
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

BLOCK = re.compile(r"(?:[^\r\n]+(?:\r?\n|$))+")  # lines, none blank
TIMING = re.compile(r"^\s*[\d:.,]+\s*-->\s*[\d:.,]+")
CUE_TAG = re.compile(r"<(/?)([A-Za-z]*|\d[\d:.]*)[^>]*>")
WORD = re.compile(r"(?:<[^>]*>|[^\s<])+")


def read_srt(data: bytes) -> Document:
    """A SubRip file's cues."""
    return _read(data, vtt=False)


def read_vtt(data: bytes) -> Document:
    """A WebVTT file's cues."""
    return _read(data, vtt=True)


def _read(data: bytes, vtt: bool) -> Document:
    text = decode_text(data, "subtitle")
    if vtt and not text.lstrip("\ufeff").startswith("WEBVTT"):
        raise UserError("not a WebVTT file: it must begin with WEBVTT")
    cues = []  # (start, end, number of lines) of each cue's text
    for block in BLOCK.finditer(text):
        lines = block.group(0).splitlines(keepends=True)
        if not lines[0].startswith(("NOTE", "STYLE", "REGION")):
            cues += _cues(lines, block.start())
    if not cues and not vtt:
        raise UserError("not a subtitle file: no cue with a timing line (00:00:01,000 --> …)")
    found = [_segment(text[a:b], vtt) for a, b, _ in cues]

    def rebuild(translations: list[str]) -> bytes:
        newline = "\r\n" if "\r\n" in text else "\n"
        escape = (lambda s: html.escape(s, quote=False)) if vtt else (lambda s: s)
        edits = []
        for (a, b, n), (_, codes), t in zip(cues, found, translations):
            cue = "".join(escape(v) if k == "text" else v for k, v in decode(t, codes))
            edits.append((a, b, newline.join(_wrapped(cue, n))))
        return splice(text, edits).encode("utf-8")

    return Document([segment for segment, _ in found], rebuild)


def _cues(lines: list[str], at: int) -> list[tuple[int, int, int]]:
    """(start, end, lines) of the text of each cue in a block of lines starting at offset `at`:
    the lines after a timing line, up to the next cue's number and timing (a blank line
    missing between two cues is not the next cue's text)."""
    timed = [i for i, line in enumerate(lines) if TIMING.match(line)]
    starts = [at]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = []
    for k, i in enumerate(timed):
        last = timed[k + 1] if k + 1 < len(timed) else len(lines)
        if last < len(lines) and last - 1 > i and lines[last - 1].strip().isdigit():
            last -= 1  # the next cue's number
        end = starts[i + 1] + len("".join(lines[i + 1 : last]).rstrip("\r\n"))
        if end > starts[i + 1]:
            out.append((starts[i + 1], end, last - i - 1))
    return out


def _segment(cue: str, vtt: bool) -> tuple[str, dict]:
    """A cue's lines as one segment, its tags as tags."""
    pieces, at = Pieces(), 0
    flat = " ".join(cue.split())
    for m in CUE_TAG.finditer(flat):
        pieces.text(html.unescape(flat[at : m.start()]) if vtt else flat[at : m.start()])
        closing, name = m.group(1), m.group(2)
        if name[:1].isdigit() or not name:  # a karaoke timestamp or `<>`: stands alone
            pieces.point(m.group(0))
        elif closing:
            pieces.close(m.group(0))
        else:
            pieces.open(m.group(0))
        at = m.end()
    pieces.text(html.unescape(flat[at:]) if vtt else flat[at:])
    return encode(pieces)


def _wrapped(cue: str, lines: int) -> list[str]:
    """`cue` over `lines` lines of about equal width (tags count as nothing), words whole."""
    words = WORD.findall(cue)
    if lines <= 1 or len(words) <= 1:
        return [" ".join(words)]
    width = lambda w: len(re.sub(r"<[^>]*>", "", w))  # noqa: E731
    total = sum(width(w) + 1 for w in words)
    out, line, used = [], [], 0
    for w in words:
        left = lines - len(out)
        if line and left > 1 and used + width(w) / 2 > total / lines:
            out.append(" ".join(line))
            line, used = [], 0
        line.append(w)
        used += width(w) + 1
    out.append(" ".join(line))
    return out
