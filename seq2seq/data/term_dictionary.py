"""A term dictionary (source word or phrase → target word or phrase) and where its entries occur
in a sentence pair: read from a `source<TAB>target` file, or built from a parallel corpus by
word co-occurrence. Built, each content word (4+ letters, lower case) of the source keeps the
target word with the best Dice coefficient over sentence pairs, 2·c(s,t) / (c(s) + c(t)), when
that is at least MIN_DICE and the two share at least `min_pairs` pairs (the idea of the
lexical shortlist, over words instead of pieces)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from seq2seq.data.cooccurrence import flat_sets, pair_keys
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text

WORD = re.compile(r"[^\W\d_]{4,}")  # content-ish words: 4+ letters
MIN_DICE, MIN_PAIRS = 0.3, 3
CHUNK = 8192  # sentence pairs counted together
_TOKEN = re.compile(r"\w+")

Match = tuple[int, int, str]  # (start, end) of a source term in the sentence, the target term


def content_words(line: str) -> list[str]:
    """The line's content words in lower case, each once, in order."""
    return list(dict.fromkeys(w.lower() for w in WORD.findall(line)))


def _ids(words: list[str], vocab: dict[str, int]) -> list[int]:
    return [vocab.setdefault(w, len(vocab)) for w in words]


def dice_dictionary(
    src: Iterable[str],
    tgt: Iterable[str],
    *,
    wanted: set[str] | None = None,
    min_pairs: int = MIN_PAIRS,
) -> dict[str, str]:
    """Source word → its best target word by Dice over the sentence pairs (only the source words
    in `wanted`, when given); ties go to more shared pairs, then the word seen first."""
    s_vocab: dict[str, int] = {}
    t_vocab: dict[str, int] = {}
    s_sets: list[list[int]] = []
    t_sets: list[list[int]] = []
    for s, t in zip(src, tgt):
        words = content_words(s)
        s_sets.append(_ids([w for w in words if wanted is None or w in wanted], s_vocab))
        t_sets.append(_ids(content_words(t), t_vocab))
    s_count = torch.bincount(flat_sets(s_sets)[0], minlength=len(s_vocab))
    t_count = torch.bincount(flat_sets(t_sets)[0], minlength=len(t_vocab))
    vt = max(len(t_vocab), 1)
    chunks = []
    for at in range(0, len(s_sets), CHUNK):
        s_part, t_part = flat_sets(s_sets[at : at + CHUNK]), flat_sets(t_sets[at : at + CHUNK])
        keys = pair_keys(*s_part, *t_part, vt)
        chunks.append(torch.unique(keys, return_counts=True))
    if not chunks:
        return {}
    keys, inverse = torch.unique(torch.cat([k for k, _ in chunks]), return_inverse=True)
    pairs = torch.zeros_like(keys).index_add_(0, inverse, torch.cat([c for _, c in chunks]))
    s_id, t_id = keys // vt, keys % vt
    dice = 2 * pairs / (s_count[s_id] + t_count[t_id])
    # Best first within each source word: Dice, then pairs, then the target seen first.
    order = torch.from_numpy(
        np.lexsort((t_id.numpy(), -pairs.numpy(), -dice.numpy(), s_id.numpy()))
    )
    first = torch.ones(order.numel(), dtype=torch.bool)
    first[1:] = s_id[order][1:] != s_id[order][:-1]
    best = order[first]
    keep = best[(dice[best] >= MIN_DICE) & (pairs[best] >= min_pairs)]
    s_words, t_words = list(s_vocab), list(t_vocab)
    return {s_words[s]: t_words[t] for s, t in zip(s_id[keep].tolist(), t_id[keep].tolist())}


def training_dictionary(src: Iterable[str], tgt: Iterable[str]) -> list[tuple[str, str]]:
    """The dictionary training annotates with when no file is given: the corpus's own, less
    the words that stay the same in translation (the model copies those anyway)."""
    return sorted((s, t) for s, t in dice_dictionary(src, tgt).items() if s != t)


def read_term_dictionary(path: Path) -> list[tuple[str, str]]:
    """The (source, target) rows of a `source<TAB>target` file; a bad row is a UserError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"data.augment.term_dictionary: cannot read {path}: {e}") from None
    pairs = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2 or not _TOKEN.search(cols[0]) or not cols[1].strip():
            raise UserError(
                f"{path}:{n}: a term dictionary row is `source<TAB>target`, both with a word "
                f"(got {line[:80]!r})"
            )
        pairs.append((cols[0].strip(), cols[1].strip()))
    if not pairs:
        raise UserError(f"data.augment.term_dictionary: {path} holds no terms")
    return pairs


def write_term_dictionary(path: Path, pairs: list[tuple[str, str]]) -> None:
    """Save (source, target) rows as a `source<TAB>target` file."""
    atomic_write_text(path, "".join(f"{s}\t{t}\n" for s, t in pairs))


def _whole(text: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(text)}(?!\w)", re.IGNORECASE)


@dataclass(eq=False)
class TermDictionary:
    """Dictionary entries indexed by their source term's first word, longest term first."""

    pairs: list[tuple[str, str]]
    by_first: dict[str, list[tuple[int, str, str]]] = field(init=False, repr=False)
    _targets: dict[str, re.Pattern] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self):
        self.by_first = {}
        for src, tgt in self.pairs:
            words = _TOKEN.findall(src.lower())
            self.by_first.setdefault(words[0], []).append((len(words), src.lower(), tgt))
        for entries in self.by_first.values():
            entries.sort(key=lambda e: -e[0])

    def _in_target(self, term: str, target: str) -> str | None:
        if term not in self._targets:
            self._targets[term] = _whole(term)
        m = self._targets[term].search(target)
        return m.group() if m else None

    def matches(self, src: str, tgt: str) -> list[Match]:
        """Entries whose source term occurs in `src` (whole words, any case) and whose target
        term occurs in `tgt`, left to right, not overlapping (the longest where several start
        at one word): (start, end, the target term as `tgt` writes it)."""
        tokens = [(m.start(), m.end(), m.group().lower()) for m in _TOKEN.finditer(src)]
        out, i = [], 0
        while i < len(tokens):
            found = None
            for n, term, target in self.by_first.get(tokens[i][2], ()):
                if i + n > len(tokens):
                    continue
                start, end = tokens[i][0], tokens[i + n - 1][1]
                if src[start:end].lower() == term and (surface := self._in_target(target, tgt)):
                    found = (n, (start, end, surface))
                    break
            if found is None:
                i += 1
                continue
            out.append(found[1])
            i += found[0]
        return out
