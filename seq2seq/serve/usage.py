"""The characters each API key has had translated, kept where a restart (or a second replica)
finds them: in this process's memory (tests, library use), in SQLite in the state directory
(`usage.sqlite3`, the default of `serve`), or in Redis (`--redis-url`, shared by replicas).

Each store reserves atomically: `reserve(holder, n, limit)` adds n only if the total stays
within the limit, in one step that no other thread, process or replica can split, so parallel
requests (or replicas on one file or one Redis) never overshoot a limit together."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from seq2seq.errors import UserError

USAGE_FILE = "usage.sqlite3"
REDIS_PREFIX = "seq2seq:usage:"

# KEYS[1]: the holder's count; ARGV: characters, limit (-1: none). The count after, or -1 when
# the characters would take it past the limit (then nothing is added).
RESERVE_LUA = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local n, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if limit >= 0 and used + n > limit then return -1 end
return redis.call('INCRBY', KEYS[1], n)
"""
# Never below 0: a refund after the count was reset by hand must not leave credit.
REFUND_LUA = """
local left = tonumber(redis.call('GET', KEYS[1]) or '0') - tonumber(ARGV[1])
redis.call('SET', KEYS[1], math.max(left, 0))
return left
"""


class MemoryUsage:
    """Counts in this process's memory: gone with it."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, holder: str, characters: int, limit: int | None) -> bool:
        """Add the characters to the holder's count if it stays within the limit."""
        with self._lock:
            used = self.counts.get(holder, 0)
            if limit is not None and used + characters > limit:
                return False
            self.counts[holder] = used + characters
            return True

    def refund(self, holder: str, characters: int) -> None:
        """Give back characters reserved for a request that was not translated."""
        with self._lock:
            self.counts[holder] = max(self.counts.get(holder, 0) - characters, 0)

    def used(self, holder: str) -> int:
        """The holder's count."""
        return self.counts.get(holder, 0)


class SqliteUsage:
    """Counts in one SQLite file (WAL), shared by every process that opens it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            # Autocommit: each statement is its own transaction, the reservation one UPDATE.
            self.db = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS usage (holder TEXT PRIMARY KEY, used INTEGER NOT NULL)"
            )
        except sqlite3.Error as e:
            raise UserError(f"--state-dir: cannot open {self.path} ({e})") from None

    def reserve(self, holder: str, characters: int, limit: int | None) -> bool:
        """Add the characters to the holder's count if it stays within the limit."""
        with self._lock:
            self.db.execute("INSERT OR IGNORE INTO usage VALUES (?, 0)", (holder,))
            done = self.db.execute(
                "UPDATE usage SET used = used + ?1 WHERE holder = ?2 "
                "AND (?3 IS NULL OR used + ?1 <= ?3)",
                (characters, holder, limit),
            )
            return done.rowcount == 1

    def refund(self, holder: str, characters: int) -> None:
        """Give back characters reserved for a request that was not translated."""
        with self._lock:
            self.db.execute(
                "UPDATE usage SET used = max(used - ?, 0) WHERE holder = ?", (characters, holder)
            )

    def used(self, holder: str) -> int:
        """The holder's count."""
        with self._lock:
            row = self.db.execute("SELECT used FROM usage WHERE holder = ?", (holder,)).fetchone()
        return row[0] if row else 0


class RedisUsage:
    """Counts in a Redis server, shared by every replica that names it."""

    def __init__(self, url: str):
        import redis  # the `serve` extra's; only a server given --redis-url needs it

        try:
            self.client = redis.Redis.from_url(url, socket_timeout=10)
            self.client.ping()
        except (redis.RedisError, ValueError) as e:
            raise UserError(f"--redis-url {url}: cannot reach it ({e})") from None
        self._reserve = self.client.register_script(RESERVE_LUA)
        self._refund = self.client.register_script(REFUND_LUA)

    def reserve(self, holder: str, characters: int, limit: int | None) -> bool:
        """Add the characters to the holder's count if it stays within the limit."""
        after = self._reserve(keys=[REDIS_PREFIX + holder], args=[characters, _or_none(limit)])
        return int(after) >= 0

    def refund(self, holder: str, characters: int) -> None:
        """Give back characters reserved for a request that was not translated."""
        self._refund(keys=[REDIS_PREFIX + holder], args=[characters])

    def used(self, holder: str) -> int:
        """The holder's count."""
        return int(self.client.get(REDIS_PREFIX + holder) or 0)


def _or_none(limit: int | None) -> int:
    return -1 if limit is None else limit


def open_usage(state_dir: Path | None, redis_url: str | None):
    """The store a server's config names: Redis if given, else SQLite in the state directory,
    else memory."""
    if redis_url:
        return RedisUsage(redis_url)
    if state_dir is None:
        return MemoryUsage()
    return SqliteUsage(state_file(state_dir, USAGE_FILE))


def state_file(state_dir: Path, name: str) -> Path:
    """The path of a store's file in the state directory, the directory made if missing."""
    try:
        Path(state_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--state-dir {state_dir}: cannot create it ({e.strerror})") from None
    return Path(state_dir) / name
