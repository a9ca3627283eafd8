"""On-the-fly augmentation of training batches, after OpusTrainer's modifiers: upper and title
case, typos, missing final punctuation, random-unicode noise and inline tags; and terminology
annotation (data.term_annotation). Each batch's changes are drawn from (seed, epoch, batch
index), so a resumed run sees the very same batches."""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from seq2seq.config import AugmentConfig, TokenizerConfig
from seq2seq.data.batching import Batch, collate
from seq2seq.data.corpus import Part, piece_links, piece_words
from seq2seq.data.layouts import load_run_tokenizer
from seq2seq.data.multilingual import encode_sources, encode_targets
from seq2seq.data.parts import INLINE_TAGS
from seq2seq.data.term_annotation import annotate_pair, term_rng
from seq2seq.data.term_dictionary import (
    TermDictionary,
    read_term_dictionary,
    training_dictionary,
    write_term_dictionary,
)
from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds, Tokenizer

# The order a pair's draws are made in; case goes before tags so that `<b>` stays lower case.
MODIFIERS = ("noise", "remove_end_punct", "uppercase", "titlecase", "typos", "tags")
_SALT = 0x617567  # keeps this stream apart from the batch order's, drawn from (seed, epoch)
# Where noise draws its characters (OpusTrainer's Noise: random unicode on both sides).
_NOISE_RANGES = (
    (0x21, 0x7E), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x5D0, 0x6FF),
    (0x905, 0x939), (0x3041, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
)  # fmt: skip

TERM_DICTIONARY_FILE = "term_dictionary.tsv"  # the dictionary built for data.augment.terms

Links = list[tuple[int, int]]
log = logging.getLogger(__name__)


def batch_rng(seed: int, epoch: int, batch: int) -> np.random.Generator:
    """The random stream of one batch of one epoch: nothing else draws from it."""
    return np.random.default_rng([seed, epoch, batch, _SALT])


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


def augment_pair(
    src: str, tgt: str, links: Links | None, rates: np.ndarray, rng: np.random.Generator
) -> tuple[str, str, Links | None] | None:
    """The pair with the modifiers its draws picked (each independently, with its rate), and
    its word links as they now stand; None when none was picked. Noise replaces the pair."""
    drawn = dict(zip(MODIFIERS, (rng.random(len(MODIFIERS)) < rates).tolist()))
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


class BatchAugmenter:
    """Augments the pairs of one epoch's batches and encodes the changed ones again with the
    run's tokenizer (loaded where it runs, so a loader worker can take it)."""

    def __init__(
        self,
        cfg: AugmentConfig,
        *,
        run_dir: Path,
        tokenizer: TokenizerConfig,
        max_len: int,
        parts: Sequence[Part],
        seed: int,
        epoch: int,
        terms: TermDictionary | None = None,
    ):
        self.rates, self.run_dir, self.tokenizer = rates_of(cfg), Path(run_dir), tokenizer
        self.terms, self.term_share = (terms, cfg.terms) if cfg.terms > 0 else (None, 0.0)
        self.max_len, self.seed, self.epoch = max_len, seed, epoch
        self.langs = [(p.src_lang, p.tgt_lang) for p in parts] or [("", "")]
        self.ends = np.cumsum([p.rows for p in parts] or [np.iinfo(np.int64).max])
        self._tok: Tokenizer | None = None

    def rows(self, rows: dict[str, list], at: np.ndarray, batch: int) -> tuple[list, list, list]:
        """Source ids, target ids and piece links (None each without alignments) of the rows
        `at` of batch number `batch`, augmented: a pair grown past max_len stays as it was."""
        if self._tok is None:
            self._tok = load_run_tokenizer(self.run_dir, self.tokenizer)
        tok, rng = self._tok, batch_rng(self.seed, self.epoch, batch)
        t_rng = term_rng(self.seed, self.epoch, batch)
        src_ids, tgt_ids = list(rows["src_ids"]), list(rows["tgt_ids"])
        aligns = rows.get("align")
        links = [None] * len(src_ids) if aligns is None else list(aligns)
        changed: dict[tuple[str, str], list[tuple[int, str, str, Links | None]]] = {}
        for k, (s, t) in enumerate(zip(rows["src"], rows["tgt"])):
            words = None
            if aligns is not None:  # the tags modifier places its tag by them
                words = word_links_of(tok, aligns[k], src_ids[k], tgt_ids[k])
            out = augment_pair(s, t, words, self.rates, rng)
            if self.terms is not None and t_rng.random() < self.term_share:
                out = self._with_terms(out or (s, t, words), out, t_rng)
            if out is not None:
                part = int(np.searchsorted(self.ends, at[k], side="right"))
                changed.setdefault(self.langs[part], []).append((k, *out))
        for (src_lang, tgt_lang), group in changed.items():
            new_src = encode_sources(tok, [g[1] for g in group], src_lang, tgt_lang)
            new_tgt = encode_targets(tok, [g[2] for g in group], tgt_lang)
            for (k, _, _, words), s_ids, t_ids in zip(group, new_src, new_tgt):
                if max(len(s_ids) - 1, len(t_ids)) > self.max_len:
                    continue
                src_ids[k], tgt_ids[k] = s_ids, t_ids
                if aligns is not None:
                    links[k] = piece_links(tok, words or [], s_ids, t_ids)
        return src_ids, tgt_ids, links

    def _with_terms(self, pair: tuple, out: tuple | None, rng: np.random.Generator):
        """The (maybe already augmented) pair with dictionary terms annotated; `out` as it was
        when the pair holds none."""
        src, tgt, words = pair
        annotated = annotate_pair(src, tgt, words, self.terms, rng)
        if annotated is None:
            return out
        return annotated[0], tgt, annotated[1]


class _AugmentedBatches(torch.utils.data.Dataset):
    """Batches of a tokenized split (text columns kept), augmented and collated on access."""

    def __init__(self, dataset, batches, positions, augmenter, ids, with_align):
        self.dataset, self.batches, self.positions = dataset, batches, positions
        self.augmenter, self.ids, self.with_align = augmenter, ids, with_align

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        idx = self.batches[i]
        src, tgt, links = self.augmenter.rows(self.dataset[idx.tolist()], idx, self.positions[i])
        return collate(src, tgt, self.ids, links if self.with_align else None)


def augmented_loader(
    dataset,
    batches: Sequence[np.ndarray],
    positions: Sequence[int],
    augmenter: BatchAugmenter,
    *,
    workers: int = 0,
    pin: bool = False,
    ids: SpecialIds = DEFAULT_IDS,
    with_align: bool = False,
):
    """batching.loader's batches, augmented: `positions` are their indices in the epoch's
    batch list, which (with seed and epoch) pick each batch's changes."""
    return torch.utils.data.DataLoader(
        _AugmentedBatches(dataset, batches, positions, augmenter, ids, with_align),
        batch_size=None,
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=4 if workers else None,
        generator=torch.Generator(),  # as batching.loader: the global RNG stays the dropout's
    )
