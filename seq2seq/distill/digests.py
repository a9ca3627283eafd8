"""Content digests of a distillation's inputs (the lines as read, the teacher's files as
loaded): chunks on disk are joined only with the inputs they were made from."""

from __future__ import annotations

import hashlib
from pathlib import Path

from seq2seq.errors import UserError

BLOCK_BYTES = 1 << 20
BLOCK_LINES = 10_000  # lines joined and hashed at once: no Python work per line


def lines_digest(lines: list[str]) -> str:
    """blake2b of the lines, each followed by a newline, as UTF-8."""
    h = hashlib.blake2b(digest_size=16)
    for start in range(0, len(lines), BLOCK_LINES):
        h.update("\n".join(lines[start : start + BLOCK_LINES]).encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """blake2b of a file's bytes, read a block at a time (a checkpoint may be gigabytes)."""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            while block := f.read(BLOCK_BYTES):
                h.update(block)
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    return h.hexdigest()


def entry(label: str, digest: str) -> dict:
    """One input of the manifest: what it is, in words for the messages, and its digest."""
    return {"input": label, "blake2b": digest}
