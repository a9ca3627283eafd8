"""The chunks joined into the student's corpus: the cross-entropy filter, the files, their
provenance and a report of what was kept and what was dropped."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from statistics import fmean

from seq2seq.distill.chunks import Part
from seq2seq.files import atomic_write_text

# Line-aligned with the distilled corpus: which input line each pair comes from and why it won.
PROVENANCE_COLUMNS = ("part", "line", "nbest_rank", "chrf", "chrf_1best", "backward_per_token")
EXAMPLES = 5


def join(
    directory: Path,
    parts: list[Part],
    records: Iterable[dict],
    languages: tuple[str, str],
    filter_percent: float,
    meta: dict,
) -> tuple[tuple[Path, Path], dict]:
    """Write `train.SRC`, `train.TGT`, `provenance.tsv` and `report.json` in `directory` from
    the chunk records (in part order); returns the two corpus files and the report."""
    rows = list(_with_parts(parts, records))
    empty = [row for row in rows if _is_empty(*row)]
    scored = [row for row in rows if not _is_empty(*row)]
    # A pair the backward run could not score (too long for it) is one the filter cannot vouch
    # for: it goes, as in `clean`'s dual cross-entropy filter, and is counted apart.
    unscored = [row for row in scored if filter_percent > 0 and "bw" not in row[1]]
    scored = [row for row in scored if filter_percent <= 0 or "bw" in row[1]]
    kept, dropped = _filter(scored, filter_percent)
    src_lang, tgt_lang = languages
    files = (directory / f"train.{src_lang}", directory / f"train.{tgt_lang}")
    atomic_write_text(files[0], "".join(p.sources[r["i"]] + "\n" for p, r in kept))
    atomic_write_text(files[1], "".join(r["hyp"] + "\n" for _, r in kept))
    atomic_write_text(directory / "provenance.tsv", "".join(_provenance(p, r) for p, r in kept))
    report = _report(rows, kept, (dropped, unscored), empty, filter_percent, meta, directory)
    atomic_write_text(
        directory / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    )
    return files, report


def _with_parts(parts: list[Part], records: Iterable[dict]):
    """Pair each record with its part: records come part by part, each part's lines in order."""
    it = iter(records)
    for part in parts:
        for _ in range(len(part.sources)):
            yield part, next(it)


def _is_empty(part: Part, r: dict) -> bool:
    """A pair with nothing to learn from: an empty source line or an empty translation."""
    return not r["hyp"].strip() or not part.sources[r["i"]].strip()


def _filter(rows: list, percent: float) -> tuple[list, list]:
    """Drop the `percent` % of pairs the backward run finds least likely (per token): the
    synthetic targets whose source the backward run cannot get back (Bergamot: 5%)."""
    if percent <= 0 or not rows:
        return rows, []
    n_drop = math.floor(len(rows) * percent / 100)
    order = sorted(range(len(rows)), key=lambda k: rows[k][1]["bw"])
    worst = set(order[:n_drop])
    kept = [row for k, row in enumerate(rows) if k not in worst]
    return kept, [rows[k] for k in order[:n_drop]]


def _provenance(part: Part, r: dict) -> str:
    values = (
        part.name,
        r["i"] + 1,
        r["rank"],
        r.get("chrf", ""),
        r.get("chrf1", ""),
        r.get("bw", ""),
    )
    return "\t".join(str(v) for v in values) + "\n"


def _example(part: Part, r: dict) -> dict:
    return {
        "part": part.name,
        "line": r["i"] + 1,
        "source": part.sources[r["i"]],
        "target": r["hyp"],
        "backward_per_token": r.get("bw"),
    }


def _report(rows, kept, gone, empty, percent, meta, directory: Path) -> dict:
    """Pairs in and out, the chrF the n-best choice gained, what the filter dropped (`gone`:
    the pairs it scored worst, those too long for the backward run to score)."""
    dropped, unscored = gone
    parallel = [r for p, r in kept if p.references is not None]
    timings = _timings(directory)
    return {
        **meta,
        "pairs_in": len(rows),
        "pairs_out": len(kept),
        "dropped_empty": len(empty),
        "dropped_by_filter": len(dropped),
        "dropped_unscored": len(unscored),
        "filter_percent": percent,
        "per_part": dict(Counter(p.name for p, _ in kept)),
        "chrf_kept": round(fmean(r["chrf"] for r in parallel), 2) if parallel else None,
        "chrf_1best": round(fmean(r["chrf1"] for r in parallel), 2) if parallel else None,
        "nbest_rank_kept": dict(sorted(Counter(r["rank"] for _, r in kept).items())),
        "filter_examples": [_example(p, r) for p, r in dropped[:EXAMPLES]],
        "unscored_examples": [_example(p, r) for p, r in unscored[:EXAMPLES]],
        "filter_threshold": dropped[-1][1]["bw"] if dropped else None,
        "teacher_lines_per_second": timings,
        "provenance_columns": list(PROVENANCE_COLUMNS),
    }


def _timings(directory: Path) -> float | None:
    """Lines the teacher distilled per second over every chunk timed (all shards, all runs)."""
    path = directory / "timings.jsonl"
    if not path.is_file():
        return None
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    seconds = sum(e["seconds"] for e in entries)
    return round(sum(e["lines"] for e in entries) / seconds, 2) if seconds else None
