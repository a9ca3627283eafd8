"""One distillation, chunk by chunk: the teacher's n-best, the hypothesis kept, its backward
score; then the chunks joined into the student's corpus."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from seq2seq.config import Config, CorpusConfig
from seq2seq.data.corpus import decode_line, load_corpus
from seq2seq.decode.score import score_fitting
from seq2seq.decode.translator import Translator
from seq2seq.distill.chunks import (
    Chunk,
    Part,
    check_manifest,
    mine,
    missing,
    plan,
    read_chunks,
    write_chunk,
)
from seq2seq.distill.digests import entry, lines_digest
from seq2seq.distill.join import join
from seq2seq.distill.select import closest_to_reference
from seq2seq.distill.teachers import load_backward, load_teacher, run_inputs
from seq2seq.errors import UserError


@dataclass(frozen=True)
class DistillOptions:
    """How to distil: the teacher and its search, the filter, the chunking and the shard."""

    teacher: Path
    beam: int = 4
    nbest: int = 4
    mono: tuple[Path, ...] = ()
    backward: Path | None = None
    filter_percent: float = 5.0
    chunk_lines: int = 1000
    shard: tuple[int, int] = (0, 1)
    languages: tuple[str | None, str | None] = (None, None)  # the teacher's codes, if they differ
    device: str = "auto"
    batch_size: int | None = None
    progress: bool = True


@dataclass
class DistillResult:
    """Where the distilled corpus is, and whether every chunk of every shard is done."""

    directory: Path
    complete: bool
    files: tuple[Path, Path] | None = None
    report: dict = field(default_factory=dict)
    left: int = 0  # chunks other shards still have to make


def read_parts(cfg: Config, mono: tuple[Path, ...]) -> list[Part]:
    """The student's training corpus (with its references) and the monolingual source files,
    each read and checked whole before anything is decoded."""
    d = cfg.data
    if d.train is None:
        raise UserError("the student config names no data.train corpus to distil")
    if isinstance(d.train, list):
        raise UserError("distillation reads one data.train corpus, not a list of parts")
    corpus = load_corpus(d.train, d.src_lang, d.tgt_lang)
    parts = [Part("train", d.train.describe(), list(corpus["src"]), list(corpus["tgt"]))]
    for i, path in enumerate(mono, 1):
        parts.append(Part(f"mono{i}", str(path), _read_text(path), None))
    return parts


def _read_text(path: Path) -> list[str]:
    """A monolingual file's lines, stripped; invalid UTF-8 names the file and line."""
    if not path.is_file():
        raise UserError(f"monolingual file not found: {path}")
    with open(path, "rb") as f:
        return [decode_line(raw, str(path), n).strip() for n, raw in enumerate(f, 1)]


def distill(cfg: Config, opts: DistillOptions) -> DistillResult:
    """Distil the student's data (config `cfg`) with the teacher: this shard's chunks that are
    not on disk yet, then, when every chunk is there and this is the only shard, the corpus."""
    directory = Path(cfg.run_dir) / "distill"  # the student's distilled corpus
    parts = read_parts(cfg, opts.mono)
    languages = _teacher_languages(cfg, opts)
    chunks = plan(parts, opts.chunk_lines)
    weights, inputs = _inputs(cfg.data.train, parts, opts)
    check_manifest(directory, _manifest(opts, parts, languages) | {"inputs": inputs})
    todo = missing(directory, mine(chunks, opts.shard))
    if todo:
        teacher = load_teacher(
            opts.teacher,
            languages,
            weights=weights["teacher"],
            beam=opts.beam,
            nbest=opts.nbest,
            device=opts.device,
            batch_size=opts.batch_size,
        )
        backward = None
        if opts.backward:
            backward = load_backward(opts.backward, languages, weights["backward"], opts.device)
        _run(directory, todo, teacher, backward, opts.progress)
    left = missing(directory, chunks)
    if left or opts.shard[1] > 1:
        return DistillResult(directory, complete=not left, left=len(left))
    meta = {"teacher": str(opts.teacher), "backward": opts.backward and str(opts.backward)}
    files, report = join(
        directory,
        parts,
        read_chunks(directory, chunks),
        (cfg.data.src_lang, cfg.data.tgt_lang),
        opts.filter_percent if opts.backward else 0.0,
        meta,
    )
    return DistillResult(directory, complete=True, files=files, report=report)


def _teacher_languages(cfg: Config, opts: DistillOptions) -> tuple[str, str]:
    """The (source, target) codes the teacher is asked for: given, else the student's."""
    src, tgt = opts.languages
    return src or cfg.data.src_lang, tgt or cfg.data.tgt_lang


def _manifest(opts: DistillOptions, parts: list[Part], languages: tuple[str, str]) -> dict:
    """The settings the chunks depend on (not the shard: shards share one set of chunks)."""
    return {
        "teacher": str(Path(opts.teacher).resolve()),
        "languages": list(languages),
        "beam": opts.beam,
        "nbest": opts.nbest,
        "backward": opts.backward and str(Path(opts.backward).resolve()),
        "chunk_lines": opts.chunk_lines,
        "parts": {p.name: {"origin": p.origin, "lines": len(p.sources)} for p in parts},
    }


def _inputs(
    train: CorpusConfig, parts: list[Part], opts: DistillOptions
) -> tuple[dict[str, Path], dict]:
    """The weights files the teacher (and backward run) are loaded from, and the digests of
    every input the chunks depend on: each side of each part as read, the runs' files."""
    # A src/tgt corpus names each side's file; the other kinds hold both sides in one.
    sides = (train.src, train.tgt) if train.src is not None else (train.describe(),) * 2
    inputs = {}
    for part in parts:
        if part.references is None:
            label = f"the monolingual file {part.origin}"
            inputs[part.name] = entry(label, lines_digest(part.sources))
            continue
        label = f"the training corpus's source side {sides[0]}"
        inputs[f"{part.name}.src"] = entry(label, lines_digest(part.sources))
        label = f"the training corpus's target side {sides[1]}"
        inputs[f"{part.name}.tgt"] = entry(label, lines_digest(part.references))
    weights: dict[str, Path] = {}
    weights["teacher"], teacher = run_inputs(opts.teacher, "teacher")
    inputs |= teacher
    if opts.backward:
        weights["backward"], backward = run_inputs(opts.backward, "backward run")
        inputs |= backward
    return weights, inputs


def _run(
    directory: Path,
    todo: list[Chunk],
    teacher: Translator,
    backward: Translator | None,
    progress: bool,
) -> None:
    """Make each chunk in turn; each is on disk before the next starts."""
    lines = sum(c.stop - c.start for c in todo)
    bar = tqdm(total=lines, desc="distill", unit="line", disable=not progress, dynamic_ncols=True)
    with bar:
        for chunk in todo:
            began = time.perf_counter()
            write_chunk(directory, chunk, distill_chunk(chunk, teacher, backward))
            seconds = time.perf_counter() - began
            _log_time(directory, chunk, seconds)
            bar.update(chunk.stop - chunk.start)


def distill_chunk(chunk: Chunk, teacher: Translator, backward: Translator | None) -> list[dict]:
    """One record per line of the chunk: the hypothesis kept, its n-best rank, its chrF and the
    1-best's against the reference (parallel lines), and its backward score per token (none for
    a pair longer than the backward run's positions: the filter drops it)."""
    part = chunk.part
    sources = part.sources[chunk.start : chunk.stop]
    nbest = teacher.translate_nbest(sources, first_line=chunk.start)
    records = []
    for j, hyps in enumerate(nbest):
        texts = [text for text, _ in hyps] or [""]
        record = {"i": chunk.start + j, "rank": 0}
        if part.references is not None:
            reference = part.references[chunk.start + j]
            rank, kept, first = closest_to_reference(texts, reference)
            record |= {"rank": rank, "chrf": round(kept, 2), "chrf1": round(first, 2)}
        record["hyp"] = texts[record["rank"]]
        records.append(record)
    if backward is not None:
        hyps = [r["hyp"] for r in records]
        for record, scored in zip(records, score_fitting(backward, hyps, sources)):
            if scored is not None:
                record["bw"] = round(scored[0] / scored[1], 4)
    return records


def _log_time(directory: Path, chunk: Chunk, seconds: float) -> None:
    """Append the chunk's decoding time (the report's teacher throughput)."""
    line = {"chunk": chunk.name, "lines": chunk.stop - chunk.start, "seconds": round(seconds, 3)}
    with open(directory / "timings.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def student_config(cfg: Config, files: tuple[Path, Path]) -> Config:
    """The student's config training on the distilled corpus instead of its own data.train."""
    data = cfg.model_dump()
    data["data"]["train"] = {"src": files[0], "tgt": files[1]}
    return Config.model_validate(data)
