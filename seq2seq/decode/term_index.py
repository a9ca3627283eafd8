"""Finding glossary source terms in text, the same way for terms and text, in time linear in
the text however many terms there are.

Text and terms are folded alike (NFKC, casefold, NFKC again; the Turkish dotted capital "İ"
folds to "i"), so "STRASSE" holds "Straße", "ﬁle" holds "file" and "İstanbul" its own spelling;
then cut into units: a run of word characters of a script written with spaces (letters,
digits, "_", combining marks), one character of a script written without spaces (Chinese,
Japanese, Thai, Lao, Khmer, Myanmar, Tibetan, Yi), one other character (punctuation, symbols),
and one " " for a run of whitespace. A term matches whole units, so "cat" is not found in
"concatenate", while "東京" is found in "我去東京了" and "iPhone" in "ซื้อiPhoneใหม่". Each unit
keeps where it came from in the original text.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from functools import lru_cache

# Scripts written without spaces between words: their characters are matched one by one.
_NO_SPACE_RANGES = (
    (0x0E00, 0x0FFF),  # Thai, Lao, Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3040, 0x31FF),  # Hiragana, Katakana, Bopomofo, CJK strokes
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA000, 0xA4CF),  # Yi
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x1B000, 0x1B16F),  # Kana supplement and extension
    (0x20000, 0x3FFFF),  # CJK extensions B and beyond
)

SPACE = " "
_WORD, _SINGLE, _SPACE, _MARK = range(4)

# Unit lists: (symbols, start offsets, end offsets) in the original text.
Units = tuple[list[str], list[int], list[int]]


@lru_cache(maxsize=1 << 16)
def _kind(ch: str) -> int:
    if ch.isspace():
        return _SPACE
    category = unicodedata.category(ch)
    if category[0] == "M":
        return _MARK
    code = ord(ch)
    if any(lo <= code <= hi for lo, hi in _NO_SPACE_RANGES):
        return _SINGLE
    return _WORD if ch.isalnum() or ch == "_" else _SINGLE


def has_word_character(text: str) -> bool:
    """Whether the folded text holds a letter, digit or "_" (of any script)."""
    return any(ch.isalnum() or ch == "_" for ch in fold(text))


@lru_cache(maxsize=1 << 16)
def fold(text: str) -> str:
    """The text in the form both terms and text are compared in."""
    text = unicodedata.normalize("NFKC", text).replace("\u0130", "i")
    return unicodedata.normalize("NFKC", text.casefold())


def text_units(text: str) -> Units:
    """The units of `text` (see the module docstring), each with its span in `text`."""
    symbols: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    word: list[str] = []  # the run of word characters being read
    word_start = word_end = 0
    i, n = 0, len(text)
    while i < n:
        j = i + 1  # a character and the combining marks after it are folded together
        while j < n and _kind(text[j]) == _MARK:
            j += 1
        for ch in fold(text[i:j]) if j - i > 1 or not text[i].isascii() else text[i].lower():
            kind = _kind(ch)
            if kind == _WORD or (kind == _MARK and (word or not symbols or symbols[-1] == SPACE)):
                if not word:
                    word_start = i
                word.append(ch)
                word_end = j
                continue
            if word:
                symbols.append("".join(word))
                starts.append(word_start)
                ends.append(word_end)
                word = []
            if kind == _MARK or (kind == _SPACE and symbols and symbols[-1] == SPACE):
                # A mark stays with the character before it; a run of spaces is one unit.
                symbols[-1] += "" if kind == _SPACE else ch
                ends[-1] = j
                continue
            symbols.append(SPACE if kind == _SPACE else ch)
            starts.append(i)
            ends.append(j)
        i = j
    if word:
        symbols.append("".join(word))
        starts.append(word_start)
        ends.append(word_end)
    return symbols, starts, ends


def term_key(term: str) -> tuple[str, ...]:
    """A source term's units, without leading or trailing space: what a text must hold."""
    symbols = text_units(term)[0]
    while symbols and symbols[0] == SPACE:
        symbols.pop(0)
    while symbols and symbols[-1] == SPACE:
        symbols.pop()
    return tuple(symbols)


class TermIndex:
    """Which key starts at each unit of a text (the longest, where several do): an Aho-Corasick
    automaton over the keys reversed, run over the text's units from the end."""

    def __init__(self, keys: list[tuple[str, ...]]):
        goto: list[dict[str, int]] = [{}]
        own = [-1]  # the key ending at a node
        for k, key in enumerate(keys):
            node = 0
            for symbol in reversed(key):
                nxt = goto[node].get(symbol)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][symbol] = nxt
                    goto.append({})
                    own.append(-1)
                node = nxt
            own[node] = k
        fail = [0] * len(goto)
        longest = own[:]  # the longest key that ends the node's path
        queue = deque(goto[0].values())
        while queue:
            node = queue.popleft()
            for symbol, child in goto[node].items():
                back = fail[node]
                while back and symbol not in goto[back]:
                    back = fail[back]
                fail[child] = goto[back].get(symbol, 0) if node else 0
                if own[child] < 0:
                    longest[child] = longest[fail[child]]
                queue.append(child)
        self._goto, self._fail, self._longest = goto, fail, longest
        self.lengths = [len(key) for key in keys]

    def longest_at(self, symbols: list[str]) -> list[int]:
        """For each unit, the index of the longest key starting there, or -1."""
        goto, fail, longest = self._goto, self._fail, self._longest
        out = [-1] * len(symbols)
        node = 0
        for at in range(len(symbols) - 1, -1, -1):
            symbol = symbols[at]
            while node and symbol not in goto[node]:
                node = fail[node]
            node = goto[node].get(symbol, 0)
            out[at] = longest[node]
        return out
