"""`seq2seq translate`: lines in, translations out, one output line per input line.

With n-best output each input line gives its hypotheses as Moses-style lines,
`index ||| translation ||| score` (index counting input lines from 0, best first). With
alignments, scores or token probabilities asked for (`alignment.OutputFields`), each line is
`translation ||| alignment ||| score ||| probabilities`, each field only when asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, TextIO

from seq2seq.data.corpus import decode_line
from seq2seq.decode.annotate import OutputFields, render_lines
from seq2seq.decode.translator import Translator
from seq2seq.errors import UserError
from seq2seq.files import atomic_write

CHUNK_LINES = 256  # lines translated together; output is written after each chunk


def translate_stream(
    translator: Translator,
    lines: Iterable[bytes],
    out: TextIO,
    *,
    name: str = "stdin",
    chunk_lines: int = CHUNK_LINES,
    errors: str = "strict",
    constraints: list[list[str]] | None = None,
    fields: OutputFields | None = None,
) -> int:
    """Translate raw lines chunk by chunk, flushing each chunk's output; return the count.
    `constraints`: the target terms of each line, if given directly."""
    chunk: list[str] = []
    first = 0  # index of the chunk's first line
    count = 0
    for count, raw in enumerate(lines, 1):
        if not chunk:
            first = count - 1
        try:
            chunk.append(decode_line(raw, name, count, errors))
        except UserError as e:
            raise UserError(f"{e}; --errors replace reads such bytes as U+FFFD") from None
        if len(chunk) >= chunk_lines:
            out.write(_render(translator, chunk, first, constraints, fields))
            out.flush()
            chunk = []
    if chunk:
        out.write(_render(translator, chunk, first, constraints, fields))
        out.flush()
    if constraints is not None and count != len(constraints):
        raise UserError(f"{len(constraints)} lines of constraints for {count} input lines")
    return count


def _render(
    translator: Translator,
    chunk: list[str],
    first: int,
    constraints: list[list[str]] | None = None,
    fields: OutputFields | None = None,
) -> str:
    if fields is not None and not fields.plain:
        if constraints is not None:
            raise UserError(
                "--constraints cannot be combined with --alignments, --scores or --tags"
            )
        found = render_lines(translator, chunk, fields, first_line=first)
        return "".join(line + "\n" for line in found)
    terms = None if constraints is None else constraints[first : first + len(chunk)]
    if terms is not None and len(terms) < len(chunk):
        line = first + len(terms) + 1
        raise UserError(f"{len(constraints)} lines of constraints; input line {line} has none")
    if translator.options.nbest == 1:
        return "".join(t + "\n" for t in translator.translate(chunk, terms, first_line=first))
    return "".join(
        f"{first + i} ||| {text} ||| {score:.4f}\n"
        for i, hyps in enumerate(translator.translate_nbest(chunk, terms, first_line=first))
        for text, score in hyps
    )


def translate_files(
    translator: Translator,
    input: Path | None,
    output: Path | None,
    *,
    errors: str = "strict",
    constraints: list[list[str]] | None = None,
    fields: OutputFields | None = None,
) -> int:
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
        # Typed at a terminal, each line is answered at once; piped, lines go in batches.
        chunk = 1 if input is None and sys.stdin.isatty() else CHUNK_LINES
        if output is None:
            return translate_stream(
                translator,
                source,
                sys.stdout,
                name=name,
                chunk_lines=chunk,
                errors=errors,
                constraints=constraints,
                fields=fields,
            )
        counted = []

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as out:
                n = translate_stream(
                    translator,
                    source,
                    out,
                    name=name,
                    chunk_lines=chunk,
                    errors=errors,
                    constraints=constraints,
                    fields=fields,
                )
                counted.append(n)

        atomic_write(output, write)
        return counted[0]
    finally:
        if input is not None:
            source.close()
