"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)`, flush it to disk, then move it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_stream(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Like `atomic_write`, for a writer of a file object; a full disk raises OSError."""

    def to_file(tmp: str) -> None:
        with _WholeWrites(tmp) as f:
            try:
                write(f)
            except Exception:
                # torch.save swallows the OSError of a failed write into a RuntimeError.
                if f.error is not None:
                    raise f.error from None
                raise

    atomic_write(path, to_file)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with UTF-8 `text` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


class _WholeWrites(io.RawIOBase):
    """A new file whose `write` writes every byte or raises, remembering the OS's error."""

    def __init__(self, path: str):
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        try:
            while view:  # a write may be short as the disk fills; the next one says why
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            self.error = self.error or e
            raise
        return size

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()
