"""Cleaning a parallel corpus: each pair's verdict (kept, or the first filter that rejects it)
from the rule filters and language ID, in blocks over worker processes, then the two dedups.

Memory is bounded by the block size and ~21 bytes a pair (a verdict byte, two 64-bit hashes and
a score), so 10M pairs hold ~210 MB, ~520 MB at the dedups' peak (their sorts' indices); the
texts are read again to be written. scripts/bench_clean_memory.py measures the whole command.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import logging
import math
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import datasets
import numpy as np
from pandas.util import hash_array  # pandas comes with datasets

from seq2seq.config import CLEAN_FILTERS, CleanConfig
from seq2seq.data.filters import first_rule_failed, normalise_whitespace
from seq2seq.data.langid import identify

log = logging.getLogger(__name__)

Keep = Callable[[list[str], list[str]], list[bool]]  # a model-based filter's verdicts on pairs

BLOCK = 20_000  # pairs a worker judges at a time
EXAMPLES = 5  # pairs shown for each filter in the report
KEPT = 0  # verdict of a kept pair; a rejected one holds 1 + its filter's index in CLEAN_FILTERS


def verdict_of(name: str) -> int:
    """The verdict byte of a filter."""
    return 1 + CLEAN_FILTERS.index(name)


@dataclass
class Judged:
    """A block's verdicts, the hashes the dedups compare and the score they rank by."""

    verdicts: np.ndarray  # uint8
    pair_hash: np.ndarray  # uint64
    tgt_hash: np.ndarray  # uint64
    score: np.ndarray  # float32: how surely both sides are in their languages


def normalise(src: str, tgt: str, cfg: CleanConfig) -> tuple[str, str]:
    """The pair as the filters see it and as it is written."""
    if "whitespace" in cfg.active():
        return normalise_whitespace(src), normalise_whitespace(tgt)
    return src.strip(), tgt.strip()


def judge_block(src: list[str], tgt: list[str], cfg: CleanConfig, langs: tuple[str, str]) -> Judged:
    """The verdicts of one block of pairs (the dedups aside: they need the whole corpus)."""
    pairs = [normalise(s, t, cfg) for s, t in zip(src, tgt)]
    verdicts = np.zeros(len(pairs), dtype=np.uint8)
    score = np.ones(len(pairs), dtype=np.float32)
    for i, (s, t) in enumerate(pairs):
        failed = first_rule_failed(s, t, cfg)
        if failed is not None:
            verdicts[i] = verdict_of(failed)
    if "langid" in cfg.active():
        _language_id(pairs, verdicts, score, cfg.langid_min_prob, langs)
    texts = np.array([s for s, _ in pairs] + [t for _, t in pairs], dtype=object)
    hashes = hash_array(texts, categorize=False) if len(texts) else np.zeros(0, np.uint64)
    src_hash, tgt_hash = hashes[: len(pairs)], hashes[len(pairs) :]
    # Wrapping multiply-add, as corpus.duplicate_bits: (a, b) and (b, a) hash apart.
    pair_hash = src_hash * np.uint64(0x9E3779B97F4A7C15) + tgt_hash
    return Judged(verdicts, pair_hash, tgt_hash, score)


def _language_id(
    pairs: list[tuple[str, str]],
    verdicts: np.ndarray,
    score: np.ndarray,
    min_prob: float,
    langs: tuple[str, str],
) -> None:
    """Reject, in place, the pairs still kept whose side is surely in another language."""
    alive = np.flatnonzero(verdicts == KEPT)
    for side, lang in enumerate(langs):
        found = identify([pairs[i][side] for i in alive])
        for i, (code, prob) in zip(alive, found):
            if code != lang and prob >= min_prob and verdicts[i] == KEPT:
                verdicts[i] = verdict_of("langid")
            # The probability of the side's own language, as far as the top answer tells.
            score[i] *= prob if code == lang else 1.0 - prob


def judge(
    blocks: Iterable[tuple[list[str], list[str]]],
    cfg: CleanConfig,
    langs: tuple[str, str],
    keep: Keep | None = None,
) -> np.ndarray:
    """Every pair's verdict (uint8, KEPT or 1 + filter index), the dedups included; `keep`, if
    given, is a model-based filter (dual_xent) that sees the pairs the rules kept, in the main
    process: keep(sources, targets) -> [passes]."""
    held: collections.deque = collections.deque()  # the blocks in flight, for `keep`

    def remembered() -> Iterator[tuple[list[str], list[str]]]:
        for block in blocks:
            if keep is not None:
                held.append(block)
            yield block

    parts = []
    for judged in _judged_blocks(remembered(), cfg, langs):
        if keep is not None:
            _model_filter(judged, *held.popleft(), cfg, keep)
        parts.append(judged)
    if not parts:
        return np.zeros(0, dtype=np.uint8)
    whole = _joined(parts)
    del parts
    if "dedup" in cfg.active():
        # Repeats of a pair share every other verdict: the first of those kept stays.
        _keep_first(whole.verdicts, whole.pair_hash, verdict_of("dedup"))
    if "dedup_target" in cfg.active():
        _keep_first(whole.verdicts, whole.tgt_hash, verdict_of("dedup_target"), whole.score)
    return whole.verdicts


def _joined(parts: list[Judged]) -> Judged:
    """The blocks' arrays joined into the corpus's, each array's blocks dropped once it is
    joined: the corpus's arrays are never all held twice (10M pairs: ~290 MB at most, not 420)."""
    joined = {}
    for name in ("verdicts", "pair_hash", "tgt_hash", "score"):
        joined[name] = np.concatenate([getattr(p, name) for p in parts])
        for p in parts:
            setattr(p, name, None)
    return Judged(**joined)


def _model_filter(judged: Judged, src: list[str], tgt: list[str], cfg: CleanConfig, keep: Keep):
    """Reject, in place, the pairs of a block still kept that `keep` turns down."""
    alive = np.flatnonzero(judged.verdicts == KEPT)
    pairs = [normalise(src[i], tgt[i], cfg) for i in alive]
    passes = np.asarray(keep([s for s, _ in pairs], [t for _, t in pairs]), dtype=bool)
    judged.verdicts[alive[~passes]] = verdict_of("dual_xent")


def _keep_first(
    verdicts: np.ndarray, key: np.ndarray, verdict: int, rank: np.ndarray | None = None
) -> None:
    """Among kept pairs of equal key, keep the highest rank (then the earliest; without a rank,
    the earliest); mark the rest."""
    alive = np.flatnonzero(verdicts == KEPT)
    keys = key[alive]
    # Stable sorts keep equals in input order, the earliest first: no index key, no arange
    # (at 10M pairs each is 80 MB more).
    if rank is None:
        order = np.argsort(keys, kind="stable")
    else:
        order = np.lexsort((-rank[alive], keys))  # the last key sorts first
    keys = keys[order]
    repeat = keys[1:] == keys[:-1]
    del keys
    verdicts[alive[order[1:][repeat]]] = verdict


def _judged_blocks(
    blocks: Iterable[tuple[list[str], list[str]]], cfg: CleanConfig, langs: tuple[str, str]
) -> Iterator[Judged]:
    """judge_block over the blocks in order, on cfg.processes workers with a few in flight."""
    blocks = iter(blocks)
    first = next(blocks, None)
    if first is None:
        return
    if cfg.processes == 1 or len(first[0]) < BLOCK:  # one block: workers would only cost
        for src, tgt in itertools.chain([first], blocks):  # their start-up (~1 s each)
            yield judge_block(src, tgt, cfg, langs)
        return
    # spawn: the caller may hold threads (torch, tokenizers) that fork would copy mid-lock.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(cfg.processes, mp_context=context) as pool:
        pending = []
        for src, tgt in itertools.chain([first], blocks):
            pending.append(pool.submit(judge_block, src, tgt, cfg, langs))
            if len(pending) > 2 * cfg.processes:  # bounded: the reader waits for the workers
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


@dataclass
class CleanReport:
    """How many pairs were read and kept, rejected by each filter, with a few examples each."""

    read: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[list[str]]] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return self.read - sum(self.rejected.values())

    def count(self, verdict: int, src: str, tgt: str) -> None:
        """Count one pair under its verdict, keeping it as an example if few are yet."""
        self.read += 1
        if verdict == KEPT:
            return
        name = CLEAN_FILTERS[verdict - 1]
        self.rejected[name] = self.rejected.get(name, 0) + 1
        shown = self.examples.setdefault(name, [])
        if len(shown) < EXAMPLES:
            shown.append([src, tgt])

    def record(self, cfg: CleanConfig) -> dict:
        """The report as JSON: counts by filter (every filter, 0 or null when off), examples."""
        on = cfg.active()
        return {
            "read": self.read,
            "kept": self.kept,
            "rejected": {
                f: (self.rejected.get(f, 0) if f in on else None)
                for f in CLEAN_FILTERS
                if f != "whitespace"  # it rewrites pairs, it rejects none
            },
            "examples": self.examples,
            "settings": cfg.model_dump(exclude={"enabled", "processes"}),
        }

    def __str__(self) -> str:
        share = self.kept / self.read if self.read else math.nan
        reasons = ", ".join(f"{k} {v:,}" for k, v in self.rejected.items())
        kept = f"{self.kept:,} of {self.read:,} pairs kept ({share:.1%})"
        return f"{kept}; rejected: {reasons or 'none'}"


def clean_dataset(
    ds: datasets.Dataset, cfg: CleanConfig, langs: tuple[str, str]
) -> datasets.Dataset:
    """The pairs of a corpus that `seq2seq clean` keeps, normalised, cached by datasets."""
    key = hashlib.blake2b(digest_size=16)
    key.update(f"{ds._fingerprint}|{langs}|{cfg.model_dump_json(exclude={'processes'})}".encode())
    return datasets.Dataset.from_generator(
        _kept_rows,
        features=ds.features,
        gen_kwargs={"ds": ds, "cfg": cfg, "langs": langs},
        fingerprint=key.hexdigest(),
    )


def _kept_rows(ds: datasets.Dataset, cfg: CleanConfig, langs: tuple[str, str]) -> Iterator[dict]:
    """Runs only when datasets has no cached copy: judges, then yields the kept rows."""
    verdicts = judge(_dataset_blocks(ds), cfg, langs)
    report = CleanReport()
    at = 0
    for batch in ds.iter(batch_size=BLOCK):
        for row in range(len(batch["src"])):
            verdict = int(verdicts[at])
            at += 1
            src, tgt = normalise(batch["src"][row], batch["tgt"][row], cfg)
            report.count(verdict, src, tgt)
            if verdict == KEPT:
                yield {**{k: v[row] for k, v in batch.items()}, "src": src, "tgt": tgt}
    log.info("clean %s-%s: %s", *langs, report)


def _dataset_blocks(ds: datasets.Dataset) -> Iterator[tuple[list[str], list[str]]]:
    for batch in ds.select_columns(["src", "tgt"]).iter(batch_size=BLOCK):
        yield batch["src"], batch["tgt"]
