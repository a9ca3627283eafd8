"""A lexical shortlist (Marian's `lex.s2t`, `--shortlist lex.50.50`): the target tokens worth
scoring for a batch, so the output layer, the largest matmul of a small decoder's step, computes
a few thousand logits instead of the whole vocabulary's.

Built once from a parallel corpus with the run's tokenizer: per source token the `k` target
tokens most associated with it, plus the `frequent` most frequent target tokens, plus EOS, UNK
and a many-language model's language tags (forced first tokens must stay reachable). A batch
scores the union of its source tokens' lists and those always-kept tokens (`Shortlist.rows`).

Association is the Dice coefficient of sentence co-occurrence, 2·c(s,t) / (c(s) + c(t)), with
c counting sentence pairs that hold the token(s). Without word alignments p(t|s) = c(s,t)/c(s)
ranks the commonest target words ("de", "la", ".") first for every source token: they fill the
k places, and the frequent list already holds them. Dice divides by the target word's own count
too, so a source word's translation outranks the words that merely share every sentence.

Counting streams: pairs are tokenized and counted in chunks, the distinct (source, target)
pairs kept as sorted int64 keys with their counts. Past `MAX_PAIRS` distinct pairs each source
token keeps only its best `max(2k, MAX_PAIRS / 2V_src)` pairs by Dice so far (lossy counting: a
pair dropped and seen again restarts from zero), so memory stays bounded whatever the corpus.

The log-normaliser of a shortlisted step runs over the shortlist only, as Marian's does:
scores are log-probabilities of the shortlist's renormalised distribution, slightly higher
than the full model's.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from seq2seq.config import load_run_config
from seq2seq.data.cooccurrence import flat_sets, pair_keys
from seq2seq.data.corpus import decode_line
from seq2seq.data.layouts import load_run_tokenizer
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import UserError
from seq2seq.files import atomic_write

FILE_NAME = "shortlist.safetensors"
FORMAT = "seq2seq-shortlist-1"
CHUNK = 4096  # sentence pairs tokenized and counted together
MAX_PAIRS = 1 << 21  # distinct (source, target) pairs kept while counting (24 MiB of them)


@dataclass(frozen=True)
class Shortlist:
    """Per source id its `k` most associated target ids, and the target ids always kept."""

    table: torch.Tensor  # [source vocabulary, k] target ids, short lists padded with EOS
    always: torch.Tensor  # sorted target ids every batch keeps (frequent, EOS, UNK, tags)
    tgt_size: int
    fingerprint: str  # of the vocabulary's pieces, so another vocabulary is refused
    frequent: int = 0

    @property
    def k(self) -> int:
        """Target ids listed per source id."""
        return self.table.size(1)

    def to(self, device: torch.device | str) -> Shortlist:
        """The same shortlist with its tensors on `device`."""
        return replace(self, table=self.table.to(device), always=self.always.to(device))

    def rows(self, src: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        """Sorted target ids a batch of source ids [B, S] may output: the union of its tokens'
        lists, the always-kept ids and `extra` (e.g. the batch's forced first tokens)."""
        parts = [self.table[torch.unique(src)].view(-1), self.always]
        if extra is not None:
            parts.append(extra.to(self.always.device).view(-1))
        return torch.unique(torch.cat(parts))


def vocabulary_fingerprint(tokenizer: Tokenizer) -> str:
    """A digest of the source and target pieces, in id order."""
    h = hashlib.sha256()
    for side in (tokenizer.src_vocabulary(), tokenizer.tgt_vocabulary()):
        h.update("\n".join(side).encode("utf-8"))
        h.update(b"\0side\0")
    return h.hexdigest()


def build_shortlist(
    tokenizer: Tokenizer,
    src_lines: Iterable[str],
    tgt_lines: Iterable[str],
    k: int = 50,
    frequent: int = 50,
) -> Shortlist:
    """The shortlist of a parallel corpus (line-aligned source and target texts), streamed."""
    if k < 1 or frequent < 0:
        raise UserError(f"a shortlist needs k ≥ 1 and frequent ≥ 0, not {k} and {frequent}")
    counts = _Counts.start(tokenizer, k)
    for chunk in _chunks(_pairs(src_lines, tgt_lines), CHUNK):
        counts.add(tokenizer, chunk)
    if counts.sentences == 0:
        raise UserError("no sentence pairs to build a shortlist from")
    keys, pairs = counts.merged()
    keys = keys[_best_per_source(keys, pairs, counts, k)]
    src, tgt = keys // counts.tgt_size, keys % counts.tgt_size
    rank = torch.arange(src.numel()) - _group_starts(src)
    table = torch.full((tokenizer.src_vocab_size, k), tokenizer.ids.eos, dtype=torch.long)
    table[src, rank] = tgt
    counts.tokens[list(counts.skip & set(range(counts.tgt_size)))] = 0
    common = counts.tokens.topk(min(frequent, counts.tgt_size))
    common = common.indices[common.values > 0]
    always = torch.cat([common, torch.tensor(sorted(always_kept(tokenizer)), dtype=torch.long)])
    return Shortlist(
        table, torch.unique(always), counts.tgt_size, vocabulary_fingerprint(tokenizer), frequent
    )


def always_kept(tokenizer: Tokenizer) -> set[int]:
    """Target ids every batch keeps whatever its words: EOS, UNK and language tags."""
    ids = {tokenizer.ids.eos, tokenizer.ids.unk, *tokenizer.languages.values()}
    return {i for i in ids if 0 <= i < tokenizer.tgt_vocab_size}


def _pairs(src_lines: Iterable[str], tgt_lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    end = object()
    for n, (src, tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines, fillvalue=end)):
        if src is end or tgt is end:
            longer = "target" if src is end else "source"
            raise UserError(
                f"source and target differ in length: the {longer} has more than {n} lines"
            )
        yield src, tgt


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    while chunk := list(itertools.islice(pairs, size)):
        yield chunk


@dataclass
class _Counts:
    """Sentence counts of each token and of each (source, target) pair seen together."""

    skip: frozenset[int]  # ids never counted (specials, language tags)
    src: torch.Tensor  # [source vocabulary] sentences holding each source id
    tgt: torch.Tensor  # [target vocabulary] sentences holding each target id
    tokens: torch.Tensor  # [target vocabulary] occurrences of each target id
    keys: torch.Tensor  # sorted source·V_tgt + target of the pairs counted
    pairs: torch.Tensor  # their counts
    pending: list[tuple[torch.Tensor, torch.Tensor]]
    keep_per_source: int
    sentences: int = 0

    @classmethod
    def start(cls, tokenizer: Tokenizer, k: int) -> _Counts:
        ids = tokenizer.ids
        skip = {ids.pad, ids.eos, ids.unk, ids.start, *tokenizer.languages.values()}
        skip |= {ids.bos} - {None}
        vs, vt = tokenizer.src_vocab_size, tokenizer.tgt_vocab_size
        empty = torch.zeros(0, dtype=torch.long)
        if vs >= 1 << 19:  # _best_per_source packs a source id in 19 bits
            raise UserError(f"a shortlist needs a source vocabulary under {1 << 19} ids, not {vs}")
        keep = max(2 * k, MAX_PAIRS // (2 * vs))
        zeros = [torch.zeros(n, dtype=torch.long) for n in (vs, vt, vt)]
        return cls(frozenset(skip), *zeros, empty, empty.int(), [], keep)

    @property
    def tgt_size(self) -> int:
        return self.tgt.numel()

    def add(self, tokenizer: Tokenizer, chunk: list[tuple[str, str]]) -> None:
        """Count a chunk of pairs; merge (and prune) once enough distinct pairs wait."""
        # Sets in Python: a few hundred nanoseconds a sentence, where tensor ops cost micros.
        tgt = tokenizer.encode_tgt([t for _, t in chunk])
        src_sets = [set(ids) - self.skip for ids in tokenizer.encode_src([s for s, _ in chunk])]
        tgt_sets = [set(ids) - self.skip for ids in tgt]
        every = torch.tensor([i for ids in tgt for i in ids], dtype=torch.long)
        self.tokens += torch.bincount(every, minlength=self.tgt_size)
        src_flat, src_len = flat_sets(src_sets)
        tgt_flat, tgt_len = flat_sets(tgt_sets)
        self.src += torch.bincount(src_flat, minlength=self.src.numel())
        self.tgt += torch.bincount(tgt_flat, minlength=self.tgt_size)
        keys = pair_keys(src_flat, src_len, tgt_flat, tgt_len, self.tgt_size)
        keys, pairs = torch.unique(keys, return_counts=True)
        self.pending.append((keys, pairs.int()))
        self.sentences += len(chunk)
        if sum(k.numel() for k, _ in self.pending) > MAX_PAIRS:
            self._merge()

    def merged(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The pairs' sorted keys and counts, everything pending merged in."""
        self._merge()
        return self.keys, self.pairs

    def _merge(self) -> None:
        keys = torch.cat([self.keys] + [k for k, _ in self.pending])
        counts = torch.cat([self.pairs] + [c for _, c in self.pending])
        self.pending = []
        self.keys, inverse = torch.unique(keys, return_inverse=True)
        self.pairs = torch.zeros_like(self.keys, dtype=torch.int32).index_add_(0, inverse, counts)
        if self.keys.numel() > MAX_PAIRS:
            keep = _best_per_source(self.keys, self.pairs, self, self.keep_per_source)
            self.keys, self.pairs = self.keys[keep], self.pairs[keep]


def _best_per_source(keys: torch.Tensor, pairs: torch.Tensor, counts: _Counts, m: int):
    """Mask of the pairs among each source id's `m` best by Dice (ties: more co-occurrences),
    in key order."""
    src = keys // counts.tgt_size
    dice = 2 * pairs / (counts.src[src] + counts.tgt[keys % counts.tgt_size])
    # One sort on a packed key (memory: one int64 per pair): source id ascending (19 bits),
    # then Dice descending (24 bits), then the co-occurrences descending (20 bits, capped).
    worse = ((1 - dice) * ((1 << 24) - 1)).long() << 20
    fewer = (1 << 20) - 1 - pairs.long().clamp(max=(1 << 20) - 1)
    order = torch.argsort((src << 44) | worse | fewer)  # grouped by source, best first
    rank = torch.arange(order.numel()) - _group_starts(src[order])
    keep = torch.zeros(keys.numel(), dtype=torch.bool)
    keep[order[rank < m]] = True
    return keep


def _group_starts(grouped: torch.Tensor) -> torch.Tensor:
    """For each element of a grouped (sorted) tensor, the index its group starts at."""
    if grouped.numel() == 0:
        return grouped
    _, sizes = torch.unique_consecutive(grouped, return_counts=True)
    starts = torch.cumsum(sizes, 0) - sizes
    return torch.repeat_interleave(starts, sizes)


def shortlist_path(run_dir: Path) -> Path:
    """Where a run directory keeps its shortlist."""
    return Path(run_dir) / FILE_NAME


def save_shortlist(run_dir: Path, shortlist: Shortlist) -> Path:
    """Write the shortlist into the run directory (atomically); returns its path."""
    path = shortlist_path(run_dir)
    tensors = {
        "table": shortlist.table.to("cpu", torch.int32).contiguous(),
        "always": shortlist.always.to("cpu", torch.int32).contiguous(),
    }
    meta = {
        "format": FORMAT,
        "tgt_vocab_size": str(shortlist.tgt_size),
        "fingerprint": shortlist.fingerprint,
        "frequent": str(shortlist.frequent),
        "score": "dice",
    }
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))
    return path


def load_shortlist(run_dir: Path, tokenizer: Tokenizer) -> Shortlist:
    """The run directory's shortlist, checked against the tokenizer's vocabulary (on CPU)."""
    path = shortlist_path(run_dir)
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no shortlist ({FILE_NAME}): build one with "
            f"`seq2seq shortlist --run {run_dir} --src FILE --tgt FILE`"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            table, always = f.get_tensor("table").long(), f.get_tensor("always").long()
    except (OSError, SafetensorError) as e:
        raise UserError(f"cannot read the shortlist {path}: {e}") from None
    if meta.get("format") != FORMAT:
        raise UserError(f"{path} is not a seq2seq shortlist; build it again")
    shortlist = Shortlist(
        table, always, int(meta["tgt_vocab_size"]), meta["fingerprint"], int(meta["frequent"])
    )
    if (
        shortlist.fingerprint != vocabulary_fingerprint(tokenizer)
        or table.size(0) != tokenizer.src_vocab_size
        or shortlist.tgt_size != tokenizer.tgt_vocab_size
    ):
        raise UserError(
            f"{path} was built for another vocabulary than this run's: build it again with "
            f"`seq2seq shortlist --run {run_dir} --src FILE --tgt FILE`"
        )
    return shortlist


def file_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, streamed; a missing file or bad UTF-8 is a UserError."""
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                yield decode_line(raw, str(path), n).strip()
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None


def build_run_shortlist(
    run_dir: Path, src: Path, tgt: Path, *, k: int = 50, frequent: int = 50
) -> tuple[Path, Shortlist]:
    """Build a run's shortlist from line-aligned source and target files and save it in the
    run directory; returns where it went and the shortlist."""
    cfg = load_run_config(run_dir)
    tokenizer = load_run_tokenizer(run_dir, cfg.tokenizer)
    if cfg.tokenizer.languages:  # a many-language tokenizer encodes the run's own direction
        tokenizer.src_lang, tokenizer.tgt_lang = cfg.data.src_lang, cfg.data.tgt_lang
    shortlist = build_shortlist(tokenizer, file_lines(src), file_lines(tgt), k, frequent)
    return save_shortlist(run_dir, shortlist), shortlist
