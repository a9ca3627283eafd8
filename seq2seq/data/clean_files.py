"""`seq2seq clean`'s job: two line-aligned files in, kept pairs, rejected pairs and a report out.

Two passes over the files: the first judges every pair (and finds invalid UTF-8 or files of
different lengths before anything is written), the second writes. All outputs are written
beside their final names and moved into place together at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

from seq2seq.config import CLEAN_FILTERS, CleanConfig
from seq2seq.data.clean import BLOCK, CleanReport, Keep, judge, normalise
from seq2seq.data.corpus import decode_line
from seq2seq.errors import UserError


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, source, target) of two line-aligned UTF-8 files, or one clear error."""
    for path in (src, tgt):
        if not path.is_file():
            raise UserError(f"file not found: {path}")
    with open(src, "rb") as a, open(tgt, "rb") as b:
        n = 0
        for raw_src, raw_tgt in zip_longest(a, b):
            if raw_src is None or raw_tgt is None:
                rest = sum(1 for _ in (a if raw_tgt is None else b)) + 1
                counts = (n + rest, n) if raw_tgt is None else (n, n + rest)
                raise UserError(
                    f"parallel files differ in length: {src} has {counts[0]} lines, "
                    f"{tgt} has {counts[1]} lines"
                )
            n += 1
            yield n, decode_line(raw_src, str(src), n), decode_line(raw_tgt, str(tgt), n)


def _blocks(src: Path, tgt: Path) -> Iterator[tuple[list[str], list[str]]]:
    block: tuple[list[str], list[str]] = ([], [])
    for _, s, t in read_pairs(src, tgt):
        block[0].append(s)
        block[1].append(t)
        if len(block[0]) == BLOCK:
            yield block
            block = ([], [])
    if block[0]:
        yield block


def clean_files(
    *,
    src: Path,
    tgt: Path,
    src_lang: str,
    tgt_lang: str,
    out: Path,
    cfg: CleanConfig,
    keep: Keep | None = None,
) -> CleanReport:
    """Write out/kept.<lang> for each side, out/rejected.tsv and out/report.json (`keep`: a
    model-based filter after the rules, see clean.judge)."""
    if src_lang == tgt_lang:
        raise UserError(f"--src-lang and --tgt-lang are both {src_lang!r}: kept.L would clash")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    verdicts = judge(_blocks(src, tgt), cfg, (src_lang, tgt_lang), keep)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    names = [f"kept.{src_lang}", f"kept.{tgt_lang}", "rejected.tsv"]
    temps = [out / f".{name}.tmp" for name in names]
    report = CleanReport()
    try:
        with (
            open(temps[0], "w", encoding="utf-8") as ks,
            open(temps[1], "w", encoding="utf-8") as kt,
            open(temps[2], "w", encoding="utf-8") as rejected,
        ):
            for (_, s, t), verdict in zip(read_pairs(src, tgt), verdicts):
                s, t = normalise(s, t, cfg)
                report.count(int(verdict), s, t)
                if verdict:
                    name = CLEAN_FILTERS[verdict - 1]
                    # A tab inside a side would shift the columns: it is written as a space.
                    rejected.write(f"{name}\t{_cell(s)}\t{_cell(t)}\n")
                else:
                    ks.write(s + "\n")
                    kt.write(t + "\n")
            for f in (ks, kt, rejected):
                f.flush()
                os.fsync(f.fileno())
        record = json.dumps(report.record(cfg), ensure_ascii=False, indent=2) + "\n"
        temps.append(out / ".report.json.tmp")
        temps[-1].write_text(record, encoding="utf-8")
        for tmp, name in zip(temps, [*names, "report.json"]):
            os.replace(tmp, out / name)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    return report


def _cell(text: str) -> str:
    return text.replace("\t", " ")
