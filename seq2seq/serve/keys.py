"""API keys for the LibreTranslate and DeepL routes: an optional keys file, and each key's
request limit over a sliding minute."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from seq2seq.errors import UserError

WINDOW_S = 60.0


def read_keys(path: Path) -> dict[str, int | None]:
    """A keys file: one key a line, optionally followed by its requests a minute (no number:
    unlimited); blank lines and `#` comments are skipped. A bad line is one UserError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-keys {path}: cannot read it ({e})") from None
    keys: dict[str, int | None] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or (len(words) == 2 and not (words[1].isdigit() and int(words[1]))):
            raise UserError(
                f"--api-keys {path}, line {number}: expected a key and optionally its requests "
                "a minute (a positive whole number)"
            )
        if words[0] in keys:
            raise UserError(f"--api-keys {path}, line {number}: the key is given twice")
        keys[words[0]] = int(words[1]) if len(words) == 2 else None
    if not keys:
        raise UserError(f"--api-keys {path}: holds no key")
    return keys


class KeyCheck:
    """Who may call: anyone when there are no keys, else holders of a key within its limit."""

    def __init__(self, keys: dict[str, int | None] | None, clock=time.monotonic):
        self.keys, self.clock = keys, clock
        self.seen: dict[str, deque] = {}

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
        limit = self.keys[key]
        if limit is None:
            return None
        now, seen = self.clock(), self.seen.setdefault(key, deque())
        while seen and seen[0] <= now - WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            return f"{limit} per 1 minute"
        seen.append(now)
        return None
