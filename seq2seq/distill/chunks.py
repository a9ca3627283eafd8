"""Distillation as chunks of lines, each written once: a killed run continues at the first
chunk not on disk, and shards of the chunks run apart (`--shard K/N`, or torchrun's ranks)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text


@dataclass(frozen=True)
class Part:
    """One input of a distillation: the parallel corpus (with references) or a monolingual file."""

    name: str  # `train`, `mono1`, `mono2`, …: chunk files and provenance say it
    origin: str  # where its lines come from, for the manifest and the provenance
    sources: list[str]
    references: list[str] | None  # None: monolingual, the 1-best is kept


@dataclass(frozen=True)
class Chunk:
    """Lines [start, stop) of one part."""

    part: Part
    index: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        """The chunk file's stem."""
        return f"{self.part.name}-{self.index:06d}"


def parse_shard(text: str | None) -> tuple[int, int]:
    """`K/N` (K from 0) as (K, N); None: the torchrun rank and world size, else (0, 1)."""
    if text is None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        return (int(os.environ.get("RANK", "0")), world) if world > 1 else (0, 1)
    k, sep, n = text.partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit():
        raise UserError(f"--shard expects K/N (e.g. 0/4), got {text!r}")
    k_, n_ = int(k), int(n)
    if n_ < 1 or not 0 <= k_ < n_:
        raise UserError(f"--shard {text}: K must be in 0 … N−1 and N ≥ 1")
    return k_, n_


def plan(parts: list[Part], chunk_lines: int) -> list[Chunk]:
    """Every chunk of every part, in order."""
    return [
        Chunk(part, i, start, min(start + chunk_lines, len(part.sources)))
        for part in parts
        for i, start in enumerate(range(0, len(part.sources), chunk_lines))
    ]


def mine(chunks: list[Chunk], shard: tuple[int, int]) -> list[Chunk]:
    """The chunks shard K of N works on: every N-th, from the K-th."""
    k, n = shard
    return chunks[k::n]


def chunk_path(directory: Path, chunk: Chunk) -> Path:
    """Where a chunk's records go."""
    return directory / "chunks" / f"{chunk.name}.jsonl"


def write_chunk(directory: Path, chunk: Chunk, records: list[dict]) -> None:
    """A chunk's records, one JSON object a line, written atomically (whole or absent)."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    path = chunk_path(directory, chunk)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def read_chunks(directory: Path, chunks: list[Chunk]) -> Iterator[dict]:
    """The records of every chunk, in order."""
    for chunk in chunks:
        with open(chunk_path(directory, chunk), encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)


def missing(directory: Path, chunks: list[Chunk]) -> list[Chunk]:
    """The chunks not on disk yet."""
    return [c for c in chunks if not chunk_path(directory, c).is_file()]


def check_manifest(directory: Path, manifest: dict) -> None:
    """Save the distillation's settings and the digests of its inputs, or check them against
    those the chunks on disk were made with: chunks of another teacher, corpus or chunking,
    or of an input changed in place since, must not be mixed."""
    path = directory / "manifest.json"
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    changed = sorted(
        k
        for k in manifest.keys() | saved.keys()
        if k != "inputs" and manifest.get(k) != saved.get(k)
    )
    if changed:
        raise UserError(
            f"{directory} holds a distillation made with other settings ({', '.join(changed)} "
            "differ); use the same ones to continue it, or another student run_dir"
        )
    _check_inputs(directory, saved.get("inputs"), manifest.get("inputs", {}))


def _check_inputs(directory: Path, saved: dict | None, inputs: dict) -> None:
    """One error naming the first input whose content differs from the one the chunks were
    made from; a manifest without digests (an older seq2seq's) cannot vouch for its chunks."""
    made = len(list((directory / "chunks").glob("*.jsonl")))
    fresh = "distil into a fresh student run_dir (--set run_dir=…) to start afresh"
    if saved is None:
        raise UserError(
            f"{directory} was written by an older seq2seq: its manifest has no content digests "
            f"to check its {made} chunk(s) against the inputs; {fresh}"
        )
    for key, now in inputs.items():
        before = saved.get(key)
        if before is None or before["blake2b"] != now["blake2b"]:
            label = before["input"] if before else now["input"]
            moved = f" (now {now['input']})" if before and before["input"] != now["input"] else ""
            raise UserError(
                f"{label} changed{moved} since the {made} chunk(s) in {directory} were written: "
                f"their translations are not of it; put it back to continue, or {fresh}"
            )
