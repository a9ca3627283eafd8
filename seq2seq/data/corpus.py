"""Parallel corpora through `datasets`: hub sets, line-aligned files, TSV, JSON lines; filtering."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from pandas.util import hash_array  # pandas comes with datasets

from seq2seq.config import Config, CorpusConfig, DataConfig, TokenizerConfig
from seq2seq.data.clean import clean_dataset
from seq2seq.data.layouts import load_run_tokenizer, tokenizer_files
from seq2seq.data.parts import cut_symbols, tagged, tokenizer_symbols
from seq2seq.data.tokenizer import Tokenizer, train_tokenizer, word_starts
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text
from seq2seq.runtime import release_arrow_pages

log = logging.getLogger(__name__)

FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
# With word alignments (guided alignment): each pair's Pharaoh line beside it.
ALIGNED_FEATURES = datasets.Features({**FEATURES, "align": datasets.Value("string")})
# Rows per Arrow record batch in the cache files. Opening a memory-mapped file reads every
# batch's header, and each read maps ~64 KiB around it: fewer, larger batches keep that small.
WRITER_BATCH_SIZE = 20_000
_FORMAT_VERSION = "1"  # bump when the parsing below changes, to invalidate cached corpora


def load_corpus(spec: CorpusConfig, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """A Dataset with string columns `src` and `tgt`, memory-mapped from the datasets cache."""
    if spec.hub:
        ds = _load_hub(spec, src_lang, tgt_lang)
    else:
        files = list(spec.files().items())
        for key, path in files:
            if not path.is_file():
                raise UserError(f"corpus file not found ({key}): {path}")
        reader = {"src": _read_aligned, "tsv": _read_tsv, "jsonl": _read_jsonl}[files[0][0]]
        paths = tuple(str(p) for _, p in files)  # a list would be split into shards
        try:
            ds = datasets.Dataset.from_generator(
                reader,
                features=ALIGNED_FEATURES if spec.alignments is not None else FEATURES,
                gen_kwargs={"paths": paths, "src_lang": src_lang, "tgt_lang": tgt_lang},
                fingerprint=_content_fingerprint(paths, src_lang, tgt_lang),
                writer_batch_size=WRITER_BATCH_SIZE,
            )
        except datasets.exceptions.DatasetGenerationError as e:
            # Our readers raise UserError with file and line; datasets wraps it.
            cause = e.__cause__
            if isinstance(cause, UserError):
                raise cause from None
            raise
    if spec.skip_pairs or (spec.max_pairs is not None and spec.max_pairs < len(ds)):
        start = min(spec.skip_pairs, len(ds))
        stop = len(ds) if spec.max_pairs is None else min(len(ds), start + spec.max_pairs)
        ds = ds.select(range(start, stop))
    return ds


def _content_fingerprint(paths: tuple[str, ...], src_lang: str, tgt_lang: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{_FORMAT_VERSION}|{src_lang}|{tgt_lang}|{len(paths)}".encode())
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0file\0")
    return h.hexdigest()


def decode_line(raw: bytes, name: str, lineno: int, errors: str = "strict") -> str:
    """A line's text without its line ending; invalid UTF-8 names the file and line.

    `errors="replace"` decodes invalid bytes as U+FFFD instead (translate's `--errors replace`).
    """
    try:
        return raw.decode("utf-8", errors).rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise UserError(f"{name}, line {lineno}: invalid UTF-8 (byte {e.start})") from None


def read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 text file."""
    try:
        with open(path, "rb") as f:
            return [decode_line(raw, str(path), n) for n, raw in enumerate(f, 1)]
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None


def _count_rest(f, counted: int) -> int:
    return counted + sum(1 for _ in f)


def _read_aligned(paths: tuple[str, ...], src_lang: str, tgt_lang: str) -> Iterator[dict[str, str]]:
    """Pairs from line-aligned src and tgt files (and the word alignments' file, if given)."""
    keys = ("src", "tgt", "align")[: len(paths)]
    with ExitStack() as stack:
        files = [stack.enter_context(open(p, "rb")) for p in paths]
        n = 0
        while True:
            lines = [f.readline() for f in files]
            if not all(lines):
                if any(lines):
                    # One file ended early: count all fully so the message names every length.
                    counts = [_count_rest(f, n + bool(raw)) for f, raw in zip(files, lines)]
                    sizes = ", ".join(f"{p} has {c} lines" for p, c in zip(paths, counts))
                    raise UserError(f"parallel files differ in length: {sizes}")
                return
            n += 1
            yield {k: decode_line(raw, p, n).strip() for k, raw, p in zip(keys, lines, paths)}


def _read_tsv(paths: tuple[str, ...], src_lang: str, tgt_lang: str) -> Iterator[dict[str, str]]:
    (path,) = paths
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            line = decode_line(raw, path, n)
            if not line.strip():
                yield {"src": "", "tgt": ""}  # counted and dropped as empty
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise UserError(
                    f"{path}, line {n}: expected 2 tab-separated fields, found {len(fields)}"
                )
            yield {"src": fields[0].strip(), "tgt": fields[1].strip()}


def _read_jsonl(paths: tuple[str, ...], src_lang: str, tgt_lang: str) -> Iterator[dict[str, str]]:
    (path,) = paths
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            line = decode_line(raw, path, n)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}, line {n}: invalid JSON: {e.msg}") from None
            if isinstance(record, dict) and isinstance(record.get("translation"), dict):
                record = record["translation"]
            if not isinstance(record, dict) or src_lang not in record or tgt_lang not in record:
                raise UserError(
                    f"{path}, line {n}: expected an object with keys {src_lang!r} and "
                    f'{tgt_lang!r} (optionally under "translation")'
                )
            src, tgt = record[src_lang], record[tgt_lang]
            if not isinstance(src, str) or not isinstance(tgt, str):
                raise UserError(f"{path}, line {n}: {src_lang!r} and {tgt_lang!r} must be strings")
            yield {"src": src.strip(), "tgt": tgt.strip()}


def _load_hub(spec: CorpusConfig, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    try:
        ds = datasets.load_dataset(spec.hub, spec.hub_config, split=spec.split or "train")
    except Exception as e:  # network, missing dataset, bad config name: all the user's to fix
        raise UserError(f"cannot load hub dataset {spec.describe()}: {e}") from None
    columns = ds.column_names
    if "translation" in columns:
        first = ds[0]["translation"] if len(ds) else {src_lang: "", tgt_lang: ""}
        if src_lang not in first or tgt_lang not in first:
            raise UserError(
                f"hub dataset {spec.describe()} has languages {sorted(first)}, "
                f"not {src_lang!r} and {tgt_lang!r}"
            )

        def pick(batch):
            pairs = batch["translation"]
            return {
                "src": [p[src_lang].strip() for p in pairs],
                "tgt": [p[tgt_lang].strip() for p in pairs],
            }

        return ds.map(pick, batched=True, remove_columns=columns, features=FEATURES)
    if src_lang in columns and tgt_lang in columns:
        ds = ds.select_columns([src_lang, tgt_lang]).rename_columns(
            {src_lang: "src", tgt_lang: "tgt"}
        )
        return ds.cast(FEATURES)
    raise UserError(
        f"hub dataset {spec.describe()} has columns {columns}; expected `translation` "
        f"or {src_lang!r} and {tgt_lang!r}"
    )


@dataclass
class FilterReport:
    """How many pairs a split had and why some were dropped (None: that check was off).

    Each dropped pair counts once, under the first reason that applies, in the order of the
    fields: empty side, repeat of an earlier pair, too long, length ratio.
    """

    read: int
    empty: int
    too_long: int
    length_ratio: int | None = None
    duplicates: int | None = None

    def dropped(self) -> dict[str, int | None]:
        """Dropped pairs by reason; None for a check that was off."""
        return {
            "empty": self.empty,
            "too_long": self.too_long,
            "length_ratio": self.length_ratio,
            "duplicates": self.duplicates,
        }

    @property
    def kept(self) -> int:
        return self.read - sum(n or 0 for n in self.dropped().values())

    def record(self) -> dict:
        """The report as a JSON-ready dict for the metrics log."""
        return {"read": self.read, "kept": self.kept, "dropped": self.dropped()}

    def __str__(self) -> str:
        counted = [(reason, n) for reason, n in self.dropped().items() if n is not None]
        reasons = ", ".join(f"{reason.replace('_', ' ')} {n:,}" for reason, n in counted)
        return f"{self.kept:,} pairs kept, {self.read - self.kept:,} dropped ({reasons})"


def duplicate_bits(ds: datasets.Dataset) -> np.ndarray:
    """One bit a pair (np.packbits order), set on each repeat of an earlier (src, tgt) pair.

    Pairs are compared by a 64-bit hash, never held as strings: 8 bytes a pair while it runs
    (about 24 at the sort), 1 bit a pair after. The mask covers the whole corpus, so repeats are
    found across the shards that `num_proc` workers tokenize. A hash collision (odds ~n²/2⁶⁵)
    would drop one distinct pair.
    """
    hashes = np.empty(len(ds), dtype=np.uint64)
    start = 0
    for table in ds.select_columns(["src", "tgt"]).with_format("arrow").iter(batch_size=100_000):
        src = hash_array(table["src"].to_numpy(zero_copy_only=False), categorize=False)
        tgt = hash_array(table["tgt"].to_numpy(zero_copy_only=False), categorize=False)
        # Wrapping multiply-add: (a, b) and (b, a) hash apart.
        hashes[start : start + len(src)] = src * np.uint64(0x9E3779B97F4A7C15) + tgt
        start += len(src)
        release_arrow_pages()  # a streaming pass: what it has read is not needed again
    # A stable sort puts the first occurrence first in each run of equal hashes.
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    repeat = np.zeros(len(order), dtype=bool)
    repeat[order[1:][hashes[1:] == hashes[:-1]]] = True
    return np.packbits(repeat)


class _EncodeAndFilter:
    """Batch function for `datasets.map`: token ids and lengths of the pairs it keeps.

    Dropping pairs here rather than with `Dataset.filter` keeps the result one contiguous Arrow
    table: a filter adds an indices mapping that every later read must go through, which costs
    memory proportional to the corpus. Picklable for `num_proc` workers (each loads the models).
    Each call appends its counts to a file of its process in `tally_dir`, since workers cannot
    return anything but rows.
    """

    def __init__(
        self,
        run_dir: str,
        tokenizer: TokenizerConfig,
        *,
        langs: tuple[str, str],
        max_len: int,
        max_len_ratio: float | None,
        repeats: np.ndarray | None,
        tally_dir: str,
    ):
        self.run_dir, self.tokenizer, self.max_len = run_dir, tokenizer, max_len
        self.langs = langs
        self.max_len_ratio, self.repeats, self.tally_dir = max_len_ratio, repeats, tally_dir
        self._tok: Tokenizer | None = None

    def __call__(self, batch: dict[str, list[str]], indices: list[int]) -> dict[str, list]:
        if self._tok is None:
            self._tok = load_run_tokenizer(Path(self.run_dir), self.tokenizer)
        repeat = np.zeros(len(indices), dtype=bool)
        if self.repeats is not None:
            at = np.asarray(indices, dtype=np.int64)
            repeat = ((self.repeats[at >> 3] >> (7 - (at & 7))) & 1).astype(bool)
        pairs, links = [], []
        empty = duplicates = 0
        aligns = batch.get("align") or [None] * len(indices)
        for s, t, r, a, at in zip(batch["src"], batch["tgt"], repeat, aligns, indices):
            if not s or not t:
                empty += 1
            elif r:
                duplicates += 1
            else:
                pairs.append((s, t))
                links.append(None if a is None else word_links(a, at))
        src_text = [s for s, _ in pairs]
        tgt_text = [t for _, t in pairs]
        src = self._tok.encode_src(src_text, *self.langs)
        tgt = self._tok.encode_tgt(tgt_text, self.langs[1])
        keep = []
        too_long = ratio = 0
        for i in range(len(pairs)):
            n_src, n_tgt = len(src[i]) - 1, len(tgt[i])  # pieces, without the source's EOS
            # max_len counts pieces; the encoder sees pieces + EOS and the decoder BOS + target
            # (predicting target + EOS), one position more, which max_positions allows for.
            if max(n_src, n_tgt) > self.max_len:
                too_long += 1
            elif self.max_len_ratio is not None and (
                max(n_src, n_tgt) > self.max_len_ratio * min(n_src, n_tgt)
            ):
                ratio += 1
            else:
                keep.append(i)
        tally = Path(self.tally_dir) / f"{os.getpid()}.tally"
        with open(tally, "a", encoding="utf-8") as f:
            f.write(f"{len(indices)} {empty} {duplicates} {too_long} {ratio}\n")
        out = {
            "src": [src_text[i] for i in keep],
            "tgt": [tgt_text[i] for i in keep],
            "src_ids": [src[i] for i in keep],
            "tgt_ids": [tgt[i] for i in keep],
            "src_len": [len(src[i]) for i in keep],
            "tgt_len": [len(tgt[i]) + 1 for i in keep],
        }
        if "align" in batch:
            out["align"] = [piece_links(self._tok, links[i], src[i], tgt[i]) for i in keep]
        return out


def word_links(line: str, index: int) -> list[tuple[int, int]]:
    """(source word, target word) pairs of a Pharaoh line, or one error naming the pair."""
    try:
        links = [tuple(int(w) for w in item.split("-")) for item in line.split()]
    except ValueError:
        links = [()]
    if not all(len(link) == 2 and min(link) >= 0 for link in links):
        raise UserError(
            f"alignments, pair {index + 1}: {line[:60]!r} is not Pharaoh `i-j` word pairs"
        )
    return links


def piece_links(
    tok: Tokenizer, links: list[tuple[int, int]], src: list[int], tgt: list[int]
) -> list[int]:
    """Word links as piece links, flat [source piece, target piece, …]: every piece of a source
    word with every piece of the target word it aligns to (links past either side's words, as
    another tokenization's may be, are left out). Target pieces count from the first one after
    the decoder's start, so a link's target position is where that piece is predicted."""

    def pieces_of(ids: list[int], pieces: list[str]) -> dict[int, list[int]]:
        by_word: dict[int, list[int]] = {}
        for at, word in enumerate(piece_words(tok, ids, pieces)):
            if word >= 0:
                by_word.setdefault(word, []).append(at)
        return by_word

    src_at, tgt_at = pieces_of(src, tok.src_pieces(src)), pieces_of(tgt, tok.tgt_pieces(tgt))
    return [
        p for i, j in links for t in tgt_at.get(j, ()) for s in src_at.get(i, ()) for p in (s, t)
    ]


def piece_words(tok: Tokenizer, ids: list[int], pieces: list[str]) -> list[int]:
    """The whitespace word of each piece of a side (-1 for special ones: EOS, language tags)."""
    special = {tok.ids.eos, tok.ids.pad, tok.ids.start, *tok.languages.values()}
    return word_starts([p if i not in special else "" for i, p in zip(ids, pieces)], {""})


def _read_tally(tally_dir: Path) -> tuple[int, ...]:
    """Pairs seen, empty, duplicates, too long, length ratio: summed over all processes."""
    totals = [0] * 5
    for path in tally_dir.glob("*.tally"):
        for line in path.read_text(encoding="utf-8").splitlines():
            totals = [a + int(b) for a, b in zip(totals, line.split())]
    return tuple(totals)


ALIGN_FEATURE = datasets.List(datasets.Value("int32"))  # flat [source piece, target piece, …]
TOKEN_FEATURES = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": datasets.List(datasets.Value("int32")),
        "tgt_ids": datasets.List(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)


def tokenize(
    ds: datasets.Dataset,
    run_dir: Path,
    tokenizer: TokenizerConfig | bool,
    *,
    max_len: int,
    num_proc: int = 1,
    max_len_ratio: float | None = None,
    dedup: bool = False,
    langs: tuple[str, str] = ("", ""),
) -> tuple[datasets.Dataset, FilterReport]:
    """Token ids and lengths of the pairs that pass the filters, and why the others did not.

    `tokenizer` describes the run directory's tokenizer (True / False: SentencePiece with the
    default ids, joint or not); `langs`, the (source, target) languages, matters to a model of
    many languages, whose ids carry them."""
    if isinstance(tokenizer, bool):
        tokenizer = TokenizerConfig(joint=tokenizer)
    key = _cache_key(ds, run_dir, tokenizer, f"{max_len}|{max_len_ratio}|{dedup}|{langs}")
    repeats = duplicate_bits(ds) if dedup else None
    features = TOKEN_FEATURES
    if "align" in ds.column_names:
        features = datasets.Features({**TOKEN_FEATURES, "align": ALIGN_FEATURE})
    with tempfile.TemporaryDirectory(prefix="seq2seq-tally-") as tally_dir:
        encode = _EncodeAndFilter(
            str(run_dir),
            tokenizer,
            langs=langs,
            max_len=max_len,
            max_len_ratio=max_len_ratio,
            repeats=repeats,
            tally_dir=tally_dir,
        )

        def run(from_cache: bool) -> datasets.Dataset:
            return ds.map(
                encode,
                with_indices=True,
                batched=True,
                batch_size=2000,
                num_proc=num_proc if num_proc > 1 else None,
                remove_columns=ds.column_names,
                features=features,
                new_fingerprint=key,
                writer_batch_size=WRITER_BATCH_SIZE,
                load_from_cache_file=None if from_cache else False,
                desc="tokenizing",
            )

        out, report = _counted(run, Path(tally_dir), key, len(ds), max_len_ratio, dedup)
    release_arrow_pages()  # the passes above mapped in whole files; the loop needs none of it
    return out, report


def _cache_key(
    ds: datasets.Dataset, run_dir: Path, tokenizer: TokenizerConfig, filters: str
) -> str:
    """The corpus (datasets' own fingerprint of it), the tokenizer's bytes and the filters."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{ds._fingerprint}|{filters}".encode())
    for p in tokenizer_files(run_dir, tokenizer):
        h.update(p.read_bytes())
    return h.hexdigest()


def _counted(
    run, tally_dir: Path, key: str, read: int, max_len_ratio: float | None, dedup: bool
) -> tuple[datasets.Dataset, FilterReport]:
    """`run(from_cache)`'s split and its filter report: this call's tally, else the counts kept
    beside the cache; a cache without them is tokenized again."""
    out = run(from_cache=True)
    report = _report_of(tally_dir, read, max_len_ratio, dedup)
    if report is None:  # nothing (or not all) tokenized now: the cache holds the counts
        report = _load_report(out, key)
        if report is None or (report.read, report.kept) != (read, len(out)):
            # Counts lost, or shards left by an interrupted run: tokenize it all again.
            for path in tally_dir.glob("*.tally"):
                path.unlink()
            out = run(from_cache=False)
            report = _report_of(tally_dir, read, max_len_ratio, dedup)
            _save_report(out, key, report)
    else:
        _save_report(out, key, report)
    return out, report


def _report_of(
    tally_dir: Path, read: int, max_len_ratio: float | None, dedup: bool
) -> FilterReport | None:
    """The report from this call's tally, if every pair was tokenized by it."""
    seen, empty, duplicates, too_long, ratio = _read_tally(tally_dir)
    if seen != read:
        return None
    return FilterReport(
        read=read,
        empty=empty,
        too_long=too_long,
        length_ratio=ratio if max_len_ratio is not None else None,
        duplicates=duplicates if dedup else None,
    )


def _report_path(out: datasets.Dataset, key: str) -> Path | None:
    # Beside the cached Arrow file it describes, so it goes wherever that cache goes.
    if not out.cache_files:
        return None
    return Path(out.cache_files[0]["filename"]).with_name(f"seq2seq-filter-{key}.json")


def _save_report(out: datasets.Dataset, key: str, report: FilterReport) -> None:
    path = _report_path(out, key)
    if path is not None:
        atomic_write_text(path, json.dumps(asdict(report)))


def _load_report(out: datasets.Dataset, key: str) -> FilterReport | None:
    path = _report_path(out, key)
    if path is None or not path.is_file():
        return None
    try:
        return FilterReport(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None  # unreadable: counted again


def lengths(ds: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of a tokenized split as int32 arrays (read from Arrow)."""
    # Straight from Arrow: datasets' numpy formatting of the same columns peaks ~6x higher.
    table = ds.select_columns(["src_len", "tgt_len"]).with_format("arrow")[:]
    out = tuple(table.column(c).to_numpy().astype(np.int32) for c in ("src_len", "tgt_len"))
    release_arrow_pages()
    return out


@dataclass(frozen=True)
class Part:
    """A run of consecutive rows of a tokenized split that share one direction (and, for
    data.train given as parts, one part: its name and weight)."""

    src_lang: str
    tgt_lang: str
    rows: int
    name: str = ""
    weight: float | None = None


@dataclass
class Prepared:
    """Tokenizer and tokenized splits a run trains on."""

    tokenizer: Tokenizer
    train: datasets.Dataset
    valid: datasets.Dataset | None
    reports: dict[str, FilterReport] = field(default_factory=dict)  # by split: what was dropped
    train_parts: list[Part] = field(default_factory=list)  # the directions, in row order
    valid_parts: list[Part] = field(default_factory=list)


@dataclass(frozen=True)
class _Direction:
    src_lang: str
    tgt_lang: str
    train: CorpusConfig
    valid: CorpusConfig | None
    name: str = ""  # a part's (data.train as parts); empty for a direction
    weight: float | None = None
    tag: str | None = None

    def label(self, split: str) -> str:
        return f"{split} {self.name or f'{self.src_lang}-{self.tgt_lang}'}"


def _directions(d: DataConfig) -> list[_Direction]:
    """What a run trains on: each of `data.pairs`, else the parts of data.train (the valid set
    goes with the first), else its one direction."""
    if d.pairs:
        return [_Direction(p.src_lang, p.tgt_lang, p.train, p.valid) for p in d.pairs]
    if d.train is None:
        raise UserError("data.train: required to train")
    if d.train_parts():
        valid = [d.valid] + [None] * (len(d.train_parts()) - 1)
        return [
            _Direction(d.src_lang, d.tgt_lang, p, v, p.name or "", p.weight, p.tag)
            for p, v in zip(d.train_parts(), valid)
        ]
    return [_Direction(d.src_lang, d.tgt_lang, d.train, d.valid)]


def prepare_data(cfg: Config, reuse_tokenizer: bool, may_train: bool = True) -> Prepared:
    """Load the corpus, train (or load) the tokenizer, tokenize and filter train and valid,
    one direction after the other when the config lists several (`data.pairs`).

    `may_train` is False on every torchrun process but rank 0, which trains the tokenizer once
    for the job; the others must find it in the (shared) run directory.
    """
    d = cfg.data
    if d.pairs and not cfg.tokenizer.languages:
        raise UserError(
            "data.pairs: set tokenizer.target_language to source_tag (a >>fr<< tag leads the "
            "source) or forced_first (the first target token is the language's), so the model "
            "is told which language to produce"
        )
    directions = _directions(d)
    raws = [load_corpus(x.train, x.src_lang, x.tgt_lang) for x in directions]
    if d.clean.enabled:  # the rule filters `seq2seq clean` applies, by the same code
        langs = [(x.src_lang, x.tgt_lang) for x in directions]
        raws = [clean_dataset(raw, d.clean, pair) for raw, pair in zip(raws, langs)]
    raws = [tagged(raw, x.tag) for raw, x in zip(raws, directions)]  # cleaned without the tag
    tokenizer = _open_tokenizer(cfg, raws, reuse_tokenizer, may_train)
    if cut := cut_symbols(tokenizer, d):
        log.warning(
            "the tokenizer cuts %s into several pieces (it was trained without them); the "
            "model still sees them, in more pieces",
            ", ".join(cut),
        )
    log.info(
        "tokenizer: vocabulary %s%s",
        tokenizer.src_vocab_size,
        " (joint)" if tokenizer.joint else f" + {tokenizer.tgt_vocab_size}",
    )
    reports: dict[str, FilterReport] = {}
    train, train_parts = _tokenize_parts(cfg, directions, raws, "train", reports)
    if len(train) == 0:
        raise UserError(
            f"the training set is empty after filtering ({reports['train']}); check data.train, "
            "data.max_len and data.max_len_ratio"
        )
    valids = [
        load_corpus(x.valid, x.src_lang, x.tgt_lang) if x.valid is not None else None
        for x in directions
    ]
    valid, valid_parts = _tokenize_parts(cfg, directions, valids, "valid", reports)
    if valid is not None and len(valid) == 0:
        log.warning("the validation set is empty after filtering; validation is skipped")
        valid, valid_parts = None, []
    return Prepared(tokenizer, train, valid, reports, train_parts, valid_parts)


def _open_tokenizer(
    cfg: Config, raws: list[datasets.Dataset], reuse: bool, may_train: bool
) -> Tokenizer:
    """The run directory's tokenizer, trained on the training texts unless it is reused."""
    run_dir = Path(cfg.run_dir)
    files = tokenizer_files(run_dir, cfg.tokenizer)
    have = all(p.is_file() for p in files)
    if not have and not may_train:
        raise UserError(
            f"the tokenizer rank 0 trained is not in {files[0].parent} on this node: under "
            "torchrun on several machines, run_dir must be on a filesystem they all share"
        )
    if reuse and have:
        log.info("tokenizer: reusing %s", files[0].parent)
        return load_run_tokenizer(run_dir, cfg.tokenizer)
    described = ", ".join(x.train.describe() for x in _directions(cfg.data))
    log.info("tokenizer: training SentencePiece (%s) on %s", cfg.tokenizer.type, described)
    train_tokenizer(
        cfg.tokenizer,
        (t for raw in raws for t in _column(raw, "src")),
        (t for raw in raws for t in _column(raw, "tgt")),
        run_dir,
        threads=torch.get_num_threads(),
        symbols=tuple(tokenizer_symbols(cfg.data)),
    )
    return load_run_tokenizer(run_dir, cfg.tokenizer)  # with its language tags, if any


def _tokenize_parts(
    cfg: Config,
    directions: list[_Direction],
    raws: list[datasets.Dataset | None],
    split: str,
    reports: dict[str, FilterReport],
) -> tuple[datasets.Dataset | None, list[Part]]:
    """One split of every direction tokenized, concatenated in order, with its parts; each
    direction's report goes in `reports` (and their sum under `split`)."""
    d, several = cfg.data, len(directions) > 1
    done, parts = [], []
    for x, raw in zip(directions, raws):
        if raw is None:
            continue
        # Validation keeps its repeats and odd ratios: only what the model cannot take goes.
        filters = {"max_len_ratio": d.max_len_ratio, "dedup": d.dedup} if split == "train" else {}
        ds, report = tokenize(
            raw,
            Path(cfg.run_dir),
            cfg.tokenizer,
            max_len=d.max_len,
            num_proc=d.num_proc,
            langs=(x.src_lang, x.tgt_lang),
            **filters,
        )
        name = x.label(split) if several else split
        log.info("%s: %s", name, report)
        reports[name] = report
        done.append(ds)
        parts.append(Part(x.src_lang, x.tgt_lang, len(ds), x.name, x.weight))
    if not done:
        return None, []
    if several:
        labels = [x.label(split) for x, raw in zip(directions, raws) if raw is not None]
        reports[split] = _summed([reports[label] for label in labels])
    return (done[0] if len(done) == 1 else datasets.concatenate_datasets(done)), parts


def _summed(reports: list[FilterReport]) -> FilterReport:
    def total(name: str) -> int | None:
        values = [getattr(r, name) for r in reports]
        return None if values[0] is None else sum(values)

    return FilterReport(
        **{f: total(f) for f in ("read", "empty", "too_long", "length_ratio", "duplicates")}
    )


def _column(ds: datasets.Dataset, name: str) -> Iterator[str]:
    # Read in slices so a large corpus never sits in memory as one Python list.
    for i, batch in enumerate(ds.select_columns([name]).iter(batch_size=10_000)):
        yield from batch[name]
        if i % 10 == 9:
            release_arrow_pages()
