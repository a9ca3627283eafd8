"""API keys of every translating route: an optional keys file, the key a request presents,
each key's request limit over a sliding minute, and the characters each key has had translated
(DeepL's /v2/usage), reserved before decoding up to its character limit (kept in usage.py)."""

from __future__ import annotations

import functools
import hashlib
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from seq2seq.errors import UserError
from seq2seq.serve.usage import MemoryUsage

WINDOW_S = 60.0
# The character limit /v2/usage reports where the keys file sets none: DeepL's clients want a
# number, and one no server will reach reads as "unlimited" to them.
NO_CHARACTER_LIMIT = 10**12
CHARACTERS = "characters="


@dataclass(frozen=True)
class KeyLimits:
    """One key's limits: requests a minute and characters since start (None: unlimited)."""

    per_minute: int | None = None
    characters: int | None = None


def _positive(word: str) -> int | None:
    """The positive whole number a word is, else None."""
    return int(word) if word.isdigit() and int(word) > 0 else None


def _key_limits(words: list[str]) -> KeyLimits | None:
    """A keys-file line's limits after its key (`[REQUESTS] [characters=N]`), or None if bad."""
    per_minute = characters = None
    rest = list(words)
    if rest and not rest[0].startswith(CHARACTERS):
        per_minute = _positive(rest.pop(0))
        if per_minute is None:
            return None
    if rest:
        word = rest.pop(0)
        characters = _positive(word[len(CHARACTERS) :]) if word.startswith(CHARACTERS) else None
        if characters is None:
            return None
    return None if rest else KeyLimits(per_minute, characters)


def _words(line: str) -> list[str]:
    """A keys-file line's words up to its comment: a `#` starting a word (at the line's start
    or after whitespace) starts one; inside a key it is part of the key."""
    words = []
    for word in line.split():
        if word.startswith("#"):
            break
        words.append(word)
    return words


def _is_key(word: str) -> bool:
    """Whether a word can be a key: visible ASCII, what an HTTP header carries unchanged."""
    return all("!" <= c <= "~" for c in word)


def read_keys(path: Path) -> dict[str, KeyLimits]:
    """A keys file: one key a line, optionally followed by its requests a minute and by
    `characters=N`, its character limit (no number: unlimited); blank lines and comments (from
    a `#` at a line's start or after whitespace) are skipped. A bad line is one UserError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-keys {path}: cannot read it ({e})") from None
    keys: dict[str, KeyLimits] = {}
    for number, line in enumerate(lines, 1):
        words = _words(line)
        if not words:
            continue
        limits = _key_limits(words[1:])
        if limits is None:
            raise UserError(
                f"--api-keys {path}, line {number}: expected a key and optionally its requests "
                "a minute (a positive whole number) and characters=N (its character limit)"
            )
        if not _is_key(words[0]):
            raise UserError(
                f"--api-keys {path}, line {number}: a key is visible ASCII characters only "
                "(what an HTTP header carries)"
            )
        if words[0] in keys:
            raise UserError(f"--api-keys {path}, line {number}: the key is given twice")
        keys[words[0]] = limits
    if not keys:
        raise UserError(f"--api-keys {path}: holds no key")
    return keys


def presented_key(headers, fields: dict | None = None) -> str | None:
    """The key a request presents: `Authorization: Bearer KEY`, `Authorization: DeepL-Auth-Key
    KEY`, `X-API-Key: KEY`, else the body's `api_key` (LibreTranslate) or `auth_key` (DeepL)."""
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() in ("bearer", "deepl-auth-key") and value.strip():
        return value.strip()
    if headers.get("x-api-key", "").strip():
        return headers["x-api-key"].strip()
    for name in ("api_key", "auth_key"):
        value = (fields or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return None


class KeyCheck:
    """Who may call: anyone when there are no keys, else holders of a key within its limits;
    and the characters translated for each key (for everyone together when there are none),
    in a usage store (usage.py), reserved before a request is decoded."""

    def __init__(self, keys: dict[str, KeyLimits] | None, usage=None, clock=time.monotonic):
        self.keys, self.clock = keys, clock
        # Requests in the last minute: this process's memory only (a restart forgets them).
        self.seen: dict[str, deque] = {}
        self.store = usage if usage is not None else MemoryUsage()

    @property
    def required(self) -> bool:
        """Whether requests need a key."""
        return self.keys is not None

    def check(self, key: str | None) -> str | None:
        """None when the request may go on; else why not: `missing`, `invalid`, or the limit
        it is over (`20 per 1 minute`)."""
        if self.keys is None:
            return None
        if not key:
            return "missing"
        if key not in self.keys:
            return "invalid"
        limit = self.keys[key].per_minute
        if limit is None:
            return None
        now, seen = self.clock(), self.seen.setdefault(key, deque())
        while seen and seen[0] <= now - WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            return f"{limit} per 1 minute"
        seen.append(now)
        return None

    def _holder(self, key: str | None) -> str:
        # Counted for known keys only (or one count when open), so that clients inventing
        # keys cannot grow the store; stored as a digest, so the store holds no key.
        if self.keys is None:
            return "*"
        return hashlib.sha256(str(key).encode()).hexdigest()

    def _limit(self, key: str | None) -> int | None:
        limits = self.keys.get(key) if self.keys is not None else None
        return limits.characters if limits is not None else None

    def usage(self, key: str | None) -> tuple[int, int]:
        """(characters translated, character limit) of a key that passed `check`."""
        return self.store.used(self._holder(key)), self._limit(key) or NO_CHARACTER_LIMIT

    def reserve(self, key: str | None, characters: int, request=None) -> str | None:
        """Count a request's characters for a key that passed `check`, before it is decoded:
        None when they fit within its character limit; else why not (nothing is counted).
        With the request, `refunding` gives them back should it not be translated."""
        limit = self._limit(key)
        if self.store.reserve(self._holder(key), characters, limit):
            if request is not None:
                request.state.reserved = (key, characters)
            return None
        left = max((limit or 0) - self.store.used(self._holder(key)), 0)
        return (
            f"the key's character limit ({limit}) has {left} characters left; "
            f"this request has {characters}"
        )

    def refund(self, key: str | None, characters: int) -> None:
        """Give back what `reserve` counted for a request that was not translated."""
        self.store.refund(self._holder(key), characters)


def refunding(keys: KeyCheck):
    """A route handler's decorator: the characters it reserved (`KeyCheck.reserve` with its
    request) are given back when it fails or answers other than 200: only what was translated
    is counted."""

    def wrap(handler):
        @functools.wraps(handler)
        async def handle(*args, **kwargs):
            request = kwargs["request"] if "request" in kwargs else args[0]
            try:
                answer = await handler(*args, **kwargs)
            except BaseException:
                _give_back(keys, request)
                raise
            if getattr(answer, "status_code", 200) != 200:
                _give_back(keys, request)
            return answer

        return handle

    return wrap


def _give_back(keys: KeyCheck, request) -> None:
    reserved = getattr(request.state, "reserved", None)
    if reserved is not None:
        request.state.reserved = None
        keys.refund(*reserved)
