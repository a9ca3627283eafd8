"""`seq2seq translate`: lines in, translations out, one output line per input line."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, TextIO

from .data import decode_line
from .errors import UserError
from .files import atomic_write
from .translator import Translator

CHUNK_LINES = 256  # lines translated together; output is written after each chunk


def translate_stream(
    translator: Translator,
    lines: Iterable[bytes],
    out: TextIO,
    name: str = "stdin",
    chunk_lines: int = CHUNK_LINES,
) -> int:
    """Translate raw lines chunk by chunk, flushing each chunk's output; return the count."""
    buffer: list[str] = []
    count = 0

    def flush() -> None:
        out.write("".join(t + "\n" for t in translator.translate(buffer)))
        out.flush()
        buffer.clear()

    for count, raw in enumerate(lines, 1):
        buffer.append(decode_line(raw, name, count))
        if len(buffer) >= chunk_lines:
            flush()
    if buffer:
        flush()
    return count


def translate_files(translator: Translator, input: Path | None, output: Path | None) -> int:
    """Translate a file (or stdin) into a file (or stdout); a file is replaced only on success."""
    source: BinaryIO
    if input is None:
        source = sys.stdin.buffer
    else:
        try:
            source = open(input, "rb")  # closed in the finally below
        except OSError as e:
            raise UserError(f"cannot read input file {input}: {e.strerror}") from None
    name = "stdin" if input is None else str(input)
    try:
        if output is None:
            return translate_stream(translator, source, sys.stdout, name)
        counted = []

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as out:
                counted.append(translate_stream(translator, source, out, name))

        atomic_write(output, write)
        return counted[0]
    finally:
        if input is not None:
            source.close()
