"""The rule filters of `seq2seq clean`, one pair at a time (OpusCleaner's defaults, as
mozilla/translations runs them): each says whether a pair passes, nothing more."""

from __future__ import annotations

import re

from seq2seq.config import CleanConfig

_SPACES = re.compile(r"\s+")
# Format characters and controls: invisible, yet they split or join words. Controls that are
# white space (CR, VT, FF, U+001C-U+001F) are left to _SPACES, which makes them a space; ZWNJ
# and ZWJ (U+200C, U+200D) stay: they are part of Persian spellings and of emoji sequences.
_INVISIBLE = re.compile(r"[\u0000-\u0008\u000e-\u001b\u007f\u200b\u2060\ufeff]")
_NUMBER = re.compile(r"\d+")
_URL = re.compile(r"(?:https?://|ftp://|www\.)[^\s<>\"']+", re.IGNORECASE)


def normalise_whitespace(text: str) -> str:
    """Runs of white space (CR, VT, FF too) as one space; invisible characters but ZWJ/ZWNJ gone."""
    return _SPACES.sub(" ", _INVISIBLE.sub("", text)).strip()


def too_long(text: str, max_words: int, max_word_length: int) -> bool:
    """More words than max_words, or a word of more characters than max_word_length."""
    words = text.split()
    return len(words) > max_words or any(len(w) > max_word_length for w in words)


def alpha_ratios(text: str) -> tuple[float, float]:
    """Share of words holding a letter, and share of non-space characters that are letters."""
    words = text.split()
    if not words:
        return 0.0, 0.0
    with_letter = sum(any(c.isalpha() for c in w) for w in words)
    chars = "".join(words)
    return with_letter / len(words), sum(c.isalpha() for c in chars) / len(chars)


def word_ratio(src: str, tgt: str) -> float:
    """Source words per target word."""
    return len(src.split()) / max(1, len(tgt.split()))


def numbers(text: str) -> set[str]:
    """The digit runs of a text, leading zeros dropped ("1,000" and "1 000" both give 1, 000)."""
    return {n.lstrip("0") or "0" for n in _NUMBER.findall(_URL.sub(" ", text))}


def number_overlap(src: str, tgt: str) -> float:
    """Numbers both sides share over numbers either side has (1.0 when neither has any)."""
    a, b = numbers(src), numbers(tgt)
    return len(a & b) / len(a | b) if a or b else 1.0


def urls(text: str) -> set[str]:
    """The URLs of a text, without trailing punctuation, lower-cased."""
    return {u.rstrip(".,;:!?)]}").lower() for u in _URL.findall(text)}


def copied(src: str, tgt: str) -> bool:
    """Whether the target is the source: the same letters, case aside (digits and punctuation
    are left out, so a pair of bare numbers is not a copy)."""
    letters = [[c for c in side.casefold() if c.isalpha()] for side in (src, tgt)]
    return bool(letters[0]) and letters[0] == letters[1]


def first_rule_failed(src: str, tgt: str, cfg: CleanConfig) -> str | None:
    """The name of the first rule filter (language ID and dedup aside) the pair fails, or None."""
    on = cfg.active()
    if "empty" in on and (not src.strip() or not tgt.strip()):
        return "empty"
    if "length" in on and (
        too_long(src, cfg.max_words, cfg.max_word_length)
        or too_long(tgt, cfg.max_words, cfg.max_word_length)
    ):
        return "length"
    if "alpha_ratio" in on:
        for side in (src, tgt):
            words, chars = alpha_ratios(side)
            if words < cfg.min_alpha_words or chars < cfg.min_alpha_chars:
                return "alpha_ratio"
    if "token_ratio" in on and not cfg.min_word_ratio <= word_ratio(src, tgt) <= cfg.max_word_ratio:
        return "token_ratio"
    if "numbers" in on and number_overlap(src, tgt) < cfg.min_number_overlap:
        return "numbers"
    if "urls" in on and urls(src) != urls(tgt):
        return "urls"
    if "copy" in on and copied(src, tgt):
        return "copy"
    return None
