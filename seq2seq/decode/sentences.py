"""Cutting a line that holds several sentences into sentences, for decoding one at a time.

A model trained mostly on single sentences drops the second of two (the first ends with EOS);
decoding each sentence and joining the translations keeps them all. The splitter is Wikimedia's
`sentencex` (rules and abbreviation lists for some 250 languages, falling back along language
families), not a hand-written regex.
"""

from __future__ import annotations

from functools import lru_cache

# Only lines up to this many characters are cached: the cache keeps its keys (request text, in
# a server), so 16,384 of them stay under ~16 MB of text however large the requests are.
CACHED_CHARS = 512


def split_sentences(text: str, lang: str) -> list[str]:
    """The sentences of `text` (stripped, none empty); `[text]` when there is one."""
    found = _cached_segment(lang, text) if len(text) <= CACHED_CHARS else _segment(lang, text)
    parts = [p.strip() for p in found]
    parts = [p for p in parts if p]
    return parts or [text]


def _segment(lang: str, text: str) -> tuple[str, ...]:
    # Imported late: a run that never splits (decode.split_sentences false) does not need it.
    import sentencex

    return tuple(sentencex.segment(lang, text))


_cached_segment = lru_cache(maxsize=16384)(_segment)
