"""On-the-fly augmentation of training batches, after OpusTrainer's modifiers: upper and title
case, typos, missing final punctuation, random-unicode noise and inline tags; and terminology
annotation (data.term_annotation). Each epoch's changes are decided and applied pair by pair
before it is batched, drawn from (seed, epoch, row), and the changed pairs encoded again: the
epoch is batched on their new lengths (so train.max_tokens holds, padding included), and a
resumed run sees the very same batches."""

from __future__ import annotations

import itertools
import logging
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seq2seq.config import AugmentConfig
from seq2seq.data.batching import Batch, collate
from seq2seq.data.corpus import Part, piece_links, piece_words
from seq2seq.data.parts import INLINE_TAGS
from seq2seq.data.term_annotation import annotate_pair, term_rng
from seq2seq.data.term_dictionary import (
    TermDictionary,
    read_term_dictionary,
    training_dictionary,
    write_term_dictionary,
)
from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds, Tokenizer
from seq2seq.runtime import release_arrow_pages

# The order a pair's draws are made in; case goes before tags so that `<b>` stays lower case.
MODIFIERS = ("noise", "remove_end_punct", "uppercase", "titlecase", "typos", "tags")
_SALT = 0x617567  # keeps this stream apart from the batch order's, drawn from (seed, epoch)
# Where noise draws its characters (OpusTrainer's Noise: random unicode on both sides).
_NOISE_RANGES = (
    (0x21, 0x7E), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x5D0, 0x6FF),
    (0x905, 0x939), (0x3041, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
)  # fmt: skip

# Rows that draw from one stream: each block's draws are made in row order, whatever the batches.
BLOCK_ROWS = 4096
TERM_DICTIONARY_FILE = "term_dictionary.tsv"  # the dictionary built for data.augment.terms

Links = list[tuple[int, int]]
log = logging.getLogger(__name__)


def block_rng(seed: int, epoch: int, block: int) -> np.random.Generator:
    """The random stream of one block of BLOCK_ROWS rows of one epoch: nothing else draws
    from it, so a row's changes depend on (seed, epoch, row) only, not on its batch."""
    return np.random.default_rng([seed, epoch, block, _SALT])


def uppercase(src: str, tgt: str) -> tuple[str, str]:
    """Both sides in upper case."""
    return src.upper(), tgt.upper()


def _title(line: str) -> str:
    return " ".join(w[:1].upper() + w[1:].lower() for w in line.split())


def titlecase(src: str, tgt: str) -> tuple[str, str]:
    """Both sides with every whitespace word capitalised and the rest of it in lower case."""
    return _title(src), _title(tgt)


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _without_end_punct(line: str) -> str:
    end = len(line)
    while end and _is_punct(line[end - 1]):
        end -= 1
    return line[:end].rstrip()


def remove_end_punct(src: str, tgt: str) -> tuple[str, str]:
    """Both sides without their final punctuation, when both end with some (and keep a word)."""
    if not (src and tgt and _is_punct(src[-1]) and _is_punct(tgt[-1])):
        return src, tgt
    a, b = _without_end_punct(src), _without_end_punct(tgt)
    return (a, b) if a and b else (src, tgt)


def typo(word: str, rng: np.random.Generator) -> str:
    """One typo in a word: two neighbouring characters swapped, one deleted, one of its own
    characters inserted, or one repeated (a one-character word only grows)."""
    kinds = ["insert", "repeat"]
    if len(word) > 1:
        kinds.append("delete")
    swaps = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
    if swaps:
        kinds.append("swap")
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "swap":
        i = swaps[int(rng.integers(len(swaps)))]
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    i = int(rng.integers(len(word)))
    if kind == "delete":
        return word[:i] + word[i + 1 :]
    if kind == "insert":
        return word[:i] + word[int(rng.integers(len(word)))] + word[i:]
    return word[: i + 1] + word[i:]


def typos(line: str, rng: np.random.Generator) -> str:
    """A typo in a few of the line's words that have letters (one in eight, at least one);
    the words stay as many, so word alignments still hold."""
    words = line.split()
    lettered = [k for k, w in enumerate(words) if any(c.isalpha() for c in w)]
    if not lettered:
        return line
    chosen = rng.choice(lettered, size=1 + len(lettered) // 8, replace=False)
    for k in sorted(chosen.tolist()):
        words[k] = typo(words[k], rng)
    return " ".join(words)


def noise_line(rng: np.random.Generator) -> str:
    """One to six words of two to five random printable characters from several scripts."""
    words = []
    for _ in range(int(rng.integers(1, 7))):
        lo, hi = _NOISE_RANGES[int(rng.integers(len(_NOISE_RANGES)))]
        chars = (chr(int(c)) for c in rng.integers(lo, hi + 1, size=int(rng.integers(2, 6))))
        words.append("".join(c for c in chars if c.isprintable() and not c.isspace()) or "~")
    return " ".join(words)


def tag_words(src: str, tgt: str, links: Links | None, rng: np.random.Generator) -> tuple[str, str]:
    """An inline tag (`<b>…</b>`) around an aligned (source word, target word) pair; without
    alignments (`links` None), around both whole sentences; a pair with no usable link is left."""
    name = INLINE_TAGS[int(rng.integers(len(INLINE_TAGS)))]

    def wrap(text: str) -> str:
        return f"<{name}>{text}</{name}>"

    if links is None:
        return wrap(src), wrap(tgt)
    s_words, t_words = src.split(), tgt.split()
    usable = [(i, j) for i, j in links if i < len(s_words) and j < len(t_words)]
    if not usable:
        return src, tgt
    i, j = usable[int(rng.integers(len(usable)))]
    s_words[i], t_words[j] = wrap(s_words[i]), wrap(t_words[j])
    return " ".join(s_words), " ".join(t_words)


def rates_of(cfg: AugmentConfig) -> np.ndarray:
    """Each modifier's probability, in the order pairs draw them."""
    return np.array([getattr(cfg, m) for m in MODIFIERS], dtype=np.float64)


def modified_pair(
    src: str, tgt: str, links: Links | None, picked: np.ndarray, rng: np.random.Generator
) -> tuple[str, str, Links | None] | None:
    """The pair with the `picked` modifiers (a flag each, in MODIFIERS' order) applied, their
    details drawn from `rng`; None when none is picked (and then nothing is drawn)."""
    drawn = dict(zip(MODIFIERS, picked.tolist()))
    if drawn["noise"]:
        line = noise_line(rng)
        return line, line, []
    if not any(drawn.values()):
        return None
    if drawn["remove_end_punct"]:
        src, tgt = remove_end_punct(src, tgt)
    if drawn["uppercase"]:
        src, tgt = uppercase(src, tgt)
    elif drawn["titlecase"]:
        src, tgt = titlecase(src, tgt)
    if drawn["typos"]:
        src = typos(src, rng)
    if drawn["tags"]:
        src, tgt = tag_words(src, tgt, links, rng)
    return src, tgt, links


def term_dictionary_for(
    cfg: AugmentConfig, run_dir: Path, train, save: bool = True
) -> TermDictionary | None:
    """The dictionary the terms modifier annotates with: data.augment.term_dictionary's, or one
    built from the training split's texts (saved in run_dir when `save`); None when it is off."""
    if cfg.terms <= 0:
        return None
    if cfg.term_dictionary is not None:
        pairs = read_term_dictionary(cfg.term_dictionary)
        log.info("terms: %d dictionary entries from %s", len(pairs), cfg.term_dictionary)
        return TermDictionary(pairs)
    pairs = training_dictionary(train["src"], train["tgt"])
    path = Path(run_dir) / TERM_DICTIONARY_FILE
    if save:
        write_term_dictionary(path, pairs)
    log.info("terms: %d dictionary entries built from the training split (%s)", len(pairs), path)
    if not pairs:
        log.warning("terms: the training split gave no dictionary entries; nothing is annotated")
    return TermDictionary(pairs)


def word_links_of(tok: Tokenizer, flat: Sequence[int], src: list[int], tgt: list[int]) -> Links:
    """The word links behind a pair's flat piece links (corpus.piece_links undone)."""
    s_words = piece_words(tok, src, tok.src_pieces(src))
    t_words = piece_words(tok, tgt, tok.tgt_pieces(tgt))
    links = {(s_words[flat[i]], t_words[flat[i + 1]]) for i in range(0, len(flat), 2)}
    return sorted(link for link in links if min(link) >= 0)


@dataclass(frozen=True)
class Ragged:
    """Variable-length int sequences in two flat arrays: sequence k is
    values[offsets[k]:offsets[k + 1]] (no Python list per sequence, so an epoch of a large
    corpus stays a few arrays)."""

    offsets: np.ndarray  # int64 [K + 1]
    values: np.ndarray  # int32 [sum of lengths]

    @staticmethod
    def of(seqs: Sequence[Sequence[int]]) -> Ragged:
        """The sequences packed."""
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum([len(q) for q in seqs], out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(seqs), np.int32, int(offsets[-1]))
        return Ragged(offsets, values)

    @staticmethod
    def joined(parts: Sequence[Ragged]) -> Ragged:
        """The parts' sequences one after another."""
        shifts = np.cumsum([0] + [len(p.values) for p in parts[:-1]])
        offsets = [np.zeros(1, np.int64)] + [p.offsets[1:] + s for p, s in zip(parts, shifts)]
        values = [np.zeros(0, np.int32)] + [p.values for p in parts]
        return Ragged(np.concatenate(offsets), np.concatenate(values))

    def __getitem__(self, k: int) -> list[int]:
        return self.values[self.offsets[k] : self.offsets[k + 1]].tolist()

    @property
    def nbytes(self) -> int:
        """Memory held by the two arrays."""
        return self.offsets.nbytes + self.values.nbytes


@dataclass(frozen=True)
class AugmentedEpoch:
    """One epoch's changed pairs: their rows (ascending), their new source and target ids and
    piece links (None without alignments), and every row's lengths as the epoch batches them."""

    rows: np.ndarray  # int64 [C]
    src: Ragged
    tgt: Ragged
    links: Ragged | None
    src_lens: np.ndarray  # int32 [N]: EOS-terminated source
    tgt_lens: np.ndarray  # int32 [N]: target + EOS

    def changed_in(self, idx: np.ndarray) -> list[tuple[int, int]]:
        """(position in `idx`, index among the changed) of the changed rows of `idx`."""
        if not len(self.rows):
            return []
        at = np.searchsorted(self.rows, idx)
        hit = np.flatnonzero(self.rows[np.minimum(at, len(self.rows) - 1)] == idx)
        return list(zip(hit.tolist(), at[hit].tolist()))

    @property
    def nbytes(self) -> int:
        """Memory held by the changed pairs and the lengths."""
        ragged = [self.src, self.tgt] + ([self.links] if self.links is not None else [])
        arrays = [self.rows, self.src_lens, self.tgt_lens]
        return sum(r.nbytes for r in ragged) + sum(a.nbytes for a in arrays)


class EpochAugmenter:
    """Decides and applies an epoch's changes pair by pair before it is batched, and encodes
    the changed pairs again with the run's tokenizer, so batches are cut on the new lengths."""

    def __init__(
        self,
        cfg: AugmentConfig,
        *,
        tokenizer: Tokenizer,
        max_len: int,
        parts: Sequence[Part],
        seed: int,
        terms: TermDictionary | None = None,
    ):
        self.rates, self.tok, self.max_len, self.seed = rates_of(cfg), tokenizer, max_len, seed
        self.terms, self.term_share = (terms, cfg.terms) if cfg.terms > 0 else (None, 0.0)
        self.langs = [(p.src_lang, p.tgt_lang) for p in parts] or [("", "")]
        self.ends = np.cumsum([p.rows for p in parts] or [np.iinfo(np.int64).max])

    def epoch(self, dataset, src_lens: np.ndarray, tgt_lens: np.ndarray, epoch: int):
        """Epoch `epoch`'s changes to a split with columns src, tgt, src_ids, tgt_ids (and
        align): a pair grown past max_len stays as it was."""
        blocks = [
            self._block(dataset, start, min(start + BLOCK_ROWS, len(src_lens)), epoch)
            for start in range(0, len(src_lens), BLOCK_ROWS)
        ]
        release_arrow_pages()  # the pass read rows from all over the corpus
        rows = np.concatenate([np.zeros(0, np.int64)] + [b[0] for b in blocks])
        src, tgt = (Ragged.joined([b[k] for b in blocks] or [Ragged.of([])]) for k in (1, 2))
        links = None
        if "align" in dataset.column_names:
            links = Ragged.joined([b[3] for b in blocks] or [Ragged.of([])])
        new_src, new_tgt = src_lens.copy(), tgt_lens.copy()
        new_src[rows] = np.diff(src.offsets)
        new_tgt[rows] = np.diff(tgt.offsets) + 1
        return AugmentedEpoch(rows, src, tgt, links, new_src, new_tgt)

    def _block(self, dataset, start: int, stop: int, epoch: int) -> tuple:
        """(rows, source ids, target ids, piece links) of the changed pairs of rows
        start…stop-1, drawn from the block's own streams."""
        block = start // BLOCK_ROWS
        rng, t_rng = block_rng(self.seed, epoch, block), term_rng(self.seed, epoch, block)
        picked = rng.random((stop - start, len(MODIFIERS))) < self.rates
        termed = t_rng.random(stop - start) < self.term_share
        candidates = np.flatnonzero(picked.any(axis=1) | termed)
        rows = dataset[(candidates + start).tolist()] if len(candidates) else {}
        aligns = rows.get("align")
        changed: dict[tuple[str, str], list[tuple[int, str, str, Links | None]]] = {}
        for k, row in enumerate(candidates.tolist()):
            s, t, words = rows["src"][k], rows["tgt"][k], None
            if aligns is not None:  # tags go by them, and the new pieces need them
                words = word_links_of(self.tok, aligns[k], rows["src_ids"][k], rows["tgt_ids"][k])
            out = modified_pair(s, t, words, picked[row], rng)
            if termed[row] and self.terms is not None:
                out = self._with_terms(out or (s, t, words), out, t_rng)
            if out is not None:
                part = int(np.searchsorted(self.ends, start + row, side="right"))
                changed.setdefault(self.langs[part], []).append((start + row, *out))
        return self._encoded(changed)

    def _encoded(self, changed: dict) -> tuple:
        """The changed pairs encoded (grouped by direction), in row order, packed."""
        out = []
        for (src_lang, tgt_lang), group in changed.items():
            new_src = self.tok.encode_src([g[1] for g in group], src_lang, tgt_lang)
            new_tgt = self.tok.encode_tgt([g[2] for g in group], tgt_lang)
            for (row, _, _, words), s_ids, t_ids in zip(group, new_src, new_tgt):
                if max(len(s_ids) - 1, len(t_ids)) <= self.max_len:
                    links = [] if words is None else piece_links(self.tok, words, s_ids, t_ids)
                    out.append((row, s_ids, t_ids, links))
        out.sort(key=lambda r: r[0])
        rows = np.array([r[0] for r in out], dtype=np.int64)
        return (rows, *(Ragged.of([r[k] for r in out]) for k in (1, 2, 3)))

    def _with_terms(self, pair: tuple, out: tuple | None, rng: np.random.Generator):
        """The (maybe already augmented) pair with dictionary terms annotated; `out` as it was
        when the pair holds none."""
        src, tgt, words = pair
        annotated = annotate_pair(src, tgt, words, self.terms, rng)
        if annotated is None:
            return out
        return annotated[0], tgt, annotated[1]


class _AugmentedBatches(torch.utils.data.Dataset):
    """Batches of a tokenized split with the epoch's changed pairs put in, collated on access."""

    def __init__(self, dataset, batches, augmented: AugmentedEpoch, ids, with_align):
        self.dataset, self.batches, self.augmented = dataset, batches, augmented
        self.ids, self.with_align = ids, with_align

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        idx, aug = self.batches[i], self.augmented
        rows = self.dataset[idx.tolist()]
        src, tgt = list(rows["src_ids"]), list(rows["tgt_ids"])
        links = list(rows["align"]) if self.with_align else None
        for k, j in aug.changed_in(idx):
            src[k], tgt[k] = aug.src[j], aug.tgt[j]
            if links is not None and aug.links is not None:
                links[k] = aug.links[j]
        return collate(src, tgt, self.ids, links)


def augmented_loader(
    dataset,
    batches: Sequence[np.ndarray],
    augmented: AugmentedEpoch,
    *,
    workers: int = 0,
    pin: bool = False,
    ids: SpecialIds = DEFAULT_IDS,
    with_align: bool = False,
):
    """batching.loader's batches (columns src_ids, tgt_ids and align with `with_align`), with
    the epoch's changed pairs in place of the originals."""
    return torch.utils.data.DataLoader(
        _AugmentedBatches(dataset, batches, augmented, ids, with_align),
        batch_size=None,
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=4 if workers else None,
        generator=torch.Generator(),  # as batching.loader: the global RNG stays the dropout's
    )
