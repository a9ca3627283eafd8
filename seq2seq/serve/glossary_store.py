"""Where DeepL glossaries are kept, each under the key that made it and at most `cap` a key: in
this process's memory (no `--state-dir`), in `glossaries.sqlite3` in the state directory (it
outlives restarts, and replicas on one machine may share it), or in Redis (`--redis-url`:
replicas on several machines share it). A key is kept only as its SHA-256, never as given."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from seq2seq.errors import UserError
from seq2seq.serve.glossaries import MAX_GLOSSARIES, StoredGlossary
from seq2seq.serve.schema import RequestError
from seq2seq.serve.usage import state_file

STORE_FILE = "glossaries.sqlite3"
BUSY_TIMEOUT_S = 10.0  # how long a write waits for another replica's on one SQLite file


class GlossaryStore(Protocol):
    """Glossaries kept under their owner (the request's key; None on a server without keys)."""

    cap: int

    def add(
        self, owner: str | None, *, name: str, source: str, target: str, entries
    ) -> StoredGlossary | None:
        """A new glossary, or None when its owner has `cap` already."""

    def get(self, owner: str | None, glossary_id: str) -> StoredGlossary | None:
        """The owner's glossary of that id, or None (another owner's is None too)."""

    def listed(self, owner: str | None) -> list[StoredGlossary]:
        """The owner's glossaries, oldest first."""

    def remove(self, owner: str | None, glossary_id: str) -> bool:
        """Whether the owner had a glossary of that id (and now has not)."""


def owner_id(key: str | None) -> str:
    """How a key is written in a store: its SHA-256 (`-` for a server without keys)."""
    return "-" if key is None else hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_glossary(*, name: str, source: str, target: str, entries) -> StoredGlossary:
    """A glossary with a fresh id, made now."""
    pairs = [(a, b) for a, b in entries]
    made = datetime.now(timezone.utc)
    return StoredGlossary(str(uuid.uuid4()), name, source, target, pairs, made)


def encode_glossary(g: StoredGlossary) -> dict[str, str]:
    """A glossary as the text fields a store keeps."""
    return {
        "glossary_id": g.glossary_id,
        "name": g.name,
        "source_lang": g.source_lang,
        "target_lang": g.target_lang,
        "entries": json.dumps(g.entries, ensure_ascii=False),
        "created": g.created.isoformat(),
    }


def decode_glossary(fields: dict[str, str]) -> StoredGlossary:
    """A glossary from the text fields a store keeps."""
    return StoredGlossary(
        fields["glossary_id"],
        fields["name"],
        fields["source_lang"],
        fields["target_lang"],
        [(a, b) for a, b in json.loads(fields["entries"])],
        datetime.fromisoformat(fields["created"]),
    )


def unavailable(what: str, error: Exception) -> RequestError:
    """The refusal when the store cannot be read or written (a 500 naming the store)."""
    return RequestError(500, "glossary", f"the glossary store is unavailable ({what}: {error})")


class MemoryGlossaries:
    """Glossaries in this process's memory: lost when it stops."""

    def __init__(self, cap: int = MAX_GLOSSARIES):
        self.cap = cap
        self._owned: dict[str, dict[str, StoredGlossary]] = {}
        self._lock = threading.Lock()

    def add(
        self, owner: str | None, *, name: str, source: str, target: str, entries
    ) -> StoredGlossary | None:
        """A new glossary, or None when its owner has `cap` already."""
        made = new_glossary(name=name, source=source, target=target, entries=entries)
        with self._lock:
            mine = self._owned.setdefault(owner_id(owner), {})
            if len(mine) >= self.cap:
                return None
            mine[made.glossary_id] = made
        return made

    def get(self, owner: str | None, glossary_id: str) -> StoredGlossary | None:
        """The owner's glossary of that id, or None."""
        with self._lock:
            return self._owned.get(owner_id(owner), {}).get(glossary_id)

    def listed(self, owner: str | None) -> list[StoredGlossary]:
        """The owner's glossaries, oldest first."""
        with self._lock:
            return list(self._owned.get(owner_id(owner), {}).values())

    def remove(self, owner: str | None, glossary_id: str) -> bool:
        """Whether the owner had a glossary of that id (and now has not)."""
        with self._lock:
            return self._owned.get(owner_id(owner), {}).pop(glossary_id, None) is not None


SCHEMA = """
CREATE TABLE IF NOT EXISTS glossaries (
    glossary_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    source_lang TEXT NOT NULL,
    target_lang TEXT NOT NULL,
    entries TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS glossaries_by_owner ON glossaries (owner, created);
"""
COLUMNS = "glossary_id, name, source_lang, target_lang, entries, created"
INSERT = f"INSERT INTO glossaries (owner, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"


class SqliteGlossaries:
    """Glossaries in one SQLite file (WAL): they outlive the process, and replicas opening the
    same file share them, a key's cap counted and kept inside one write transaction."""

    def __init__(self, path: Path, cap: int = MAX_GLOSSARIES):
        self.path, self.cap = Path(path), cap
        self._lock = threading.Lock()  # one connection, used by the server's worker threads
        try:
            self._db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as e:
            raise UserError(
                f"--state-dir: cannot open {self.path} as the glossary store ({e})"
            ) from None

    def _rows(self, sql: str, args: tuple) -> list[StoredGlossary]:
        names = [c.strip() for c in COLUMNS.split(",")]
        try:
            with self._lock:
                rows = self._db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise unavailable(self.path.name, e) from None
        return [decode_glossary(dict(zip(names, row))) for row in rows]

    def add(
        self, owner: str | None, *, name: str, source: str, target: str, entries
    ) -> StoredGlossary | None:
        """A new glossary, or None when its owner has `cap` already."""
        made = new_glossary(name=name, source=source, target=target, entries=entries)
        fields, who = encode_glossary(made), owner_id(owner)
        try:
            with self._lock:
                # IMMEDIATE takes the file's write lock first: no other replica adds between
                # the count and the insert.
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    (count,) = self._db.execute(
                        "SELECT COUNT(*) FROM glossaries WHERE owner = ?", (who,)
                    ).fetchone()
                    if count < self.cap:
                        self._db.execute(INSERT, (who, *fields.values()))
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as e:
            raise unavailable(self.path.name, e) from None
        return made if count < self.cap else None

    def get(self, owner: str | None, glossary_id: str) -> StoredGlossary | None:
        """The owner's glossary of that id, or None."""
        sql = f"SELECT {COLUMNS} FROM glossaries WHERE owner = ? AND glossary_id = ?"
        found = self._rows(sql, (owner_id(owner), glossary_id))
        return found[0] if found else None

    def listed(self, owner: str | None) -> list[StoredGlossary]:
        """The owner's glossaries, oldest first."""
        sql = f"SELECT {COLUMNS} FROM glossaries WHERE owner = ? ORDER BY created, rowid"
        return self._rows(sql, (owner_id(owner),))

    def remove(self, owner: str | None, glossary_id: str) -> bool:
        """Whether the owner had a glossary of that id (and now has not)."""
        sql = "DELETE FROM glossaries WHERE owner = ? AND glossary_id = ?"
        try:
            with self._lock:
                return self._db.execute(sql, (owner_id(owner), glossary_id)).rowcount > 0
        except sqlite3.Error as e:
            raise unavailable(self.path.name, e) from None

    def close(self) -> None:
        """The file closed."""
        with self._lock:
            self._db.close()


# Adds a glossary unless its owner has `cap` already, in one step no other client splits.
ADD_SCRIPT = """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('ZADD', KEYS[1], ARGV[2], KEYS[2])
return 1
"""
# Removes a glossary if its owner's set holds it: only that set says whose it is.
REMOVE_SCRIPT = """
if redis.call('ZREM', KEYS[1], KEYS[2]) == 0 then return 0 end
redis.call('DEL', KEYS[2])
return 1
"""


class RedisGlossaries:
    """Glossaries in Redis, shared by every replica given the same URL: each a hash, each
    owner's a sorted set of them by creation; the cap counted and kept in one script."""

    def __init__(self, url: str, cap: int = MAX_GLOSSARIES, prefix: str = "seq2seq:"):
        import redis  # the optional `serve` extra, needed only with --redis-url

        self.cap, self.prefix, self._errors = cap, prefix, redis.RedisError
        try:
            self._db = redis.Redis.from_url(
                url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
            )
            self._db.ping()
        except (redis.RedisError, ValueError) as e:
            raise UserError(f"--redis-url: cannot reach the Redis server ({e})") from None
        self._add = self._db.register_script(ADD_SCRIPT)
        self._remove = self._db.register_script(REMOVE_SCRIPT)

    def _owned(self, owner: str | None) -> str:
        return f"{self.prefix}glossaries:{owner_id(owner)}"

    def _one(self, glossary_id: str) -> str:
        return f"{self.prefix}glossary:{glossary_id}"

    def add(
        self, owner: str | None, *, name: str, source: str, target: str, entries
    ) -> StoredGlossary | None:
        """A new glossary, or None when its owner has `cap` already."""
        made = new_glossary(name=name, source=source, target=target, entries=entries)
        fields = [v for pair in encode_glossary(made).items() for v in pair]
        keys = [self._owned(owner), self._one(made.glossary_id)]
        try:
            added = self._add(keys=keys, args=[self.cap, made.created.timestamp(), *fields])
        except self._errors as e:
            raise unavailable("Redis", e) from None
        return made if added else None

    def get(self, owner: str | None, glossary_id: str) -> StoredGlossary | None:
        """The owner's glossary of that id, or None."""
        try:
            if self._db.zscore(self._owned(owner), self._one(glossary_id)) is None:
                return None
            fields = self._db.hgetall(self._one(glossary_id))
        except self._errors as e:
            raise unavailable("Redis", e) from None
        return decode_glossary(fields) if fields else None  # removed in between: gone

    def listed(self, owner: str | None) -> list[StoredGlossary]:
        """The owner's glossaries, oldest first."""
        try:
            names = self._db.zrange(self._owned(owner), 0, -1)
            pipe = self._db.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(name)
            found = pipe.execute()
        except self._errors as e:
            raise unavailable("Redis", e) from None
        return [decode_glossary(fields) for fields in found if fields]

    def remove(self, owner: str | None, glossary_id: str) -> bool:
        """Whether the owner had a glossary of that id (and now has not)."""
        try:
            gone = self._remove(keys=[self._owned(owner), self._one(glossary_id)])
        except self._errors as e:
            raise unavailable("Redis", e) from None
        return bool(gone)

    def close(self) -> None:
        """The connections closed."""
        self._db.close()


def open_glossaries(state_dir: Path | None, redis_url: str | None) -> GlossaryStore:
    """The server's glossary store: Redis when given a URL, else `glossaries.sqlite3` in the
    state directory (made if missing), else memory."""
    if redis_url:
        return RedisGlossaries(redis_url)
    if state_dir is None:
        return MemoryGlossaries()
    return SqliteGlossaries(state_file(state_dir, STORE_FILE))
