"""Terminology annotation (Dinu et al. 2019, the "append" method): a source term followed
inline by the target term the translation is to use, `Click the button <t> bouton-poussoir
</t>.`, so that a model trained on such sources places a glossary's terms itself and, at
inference, a glossary annotates the source and the plain beam search does the rest. Training
annotates a drawn share of pairs with dictionary terms found on both sides, written as the
target writes them (what the paper measured). The markers are pieces of their own in a
tokenizer trained with data.augment.terms > 0, and never occur on the target side."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import numpy as np

from seq2seq.data.term_dictionary import Match, TermDictionary
from seq2seq.data.tokenizer import Tokenizer

TERM_OPEN, TERM_CLOSE = "<t>", "</t>"
TERM_SYMBOLS = (TERM_OPEN, TERM_CLOSE)
KEEP_EACH = 0.5  # each term found in a drawn pair is annotated with this probability
_SALT = 0x7465726D  # the terms' own stream: the other modifiers' draws stay as they were

Links = list[tuple[int, int]]


def term_rng(seed: int, epoch: int, batch: int) -> np.random.Generator:
    """The random stream the terms modifier draws from in one batch of one epoch."""
    return np.random.default_rng([seed, epoch, batch, _SALT])


def annotation(target: str) -> str:
    """What follows a source term: ` <t> target </t>`."""
    return f" {TERM_OPEN} {target} {TERM_CLOSE}"


def annotate(text: str, spans: Sequence[Match]) -> str:
    """`text` with each span's target term annotated right after its source term (spans in
    order and not overlapping; what followed the term, a full stop say, follows `</t>`)."""
    out, at = [], 0
    for _, end, target in spans:
        out += [text[at:end], annotation(target)]
        at = end
    out.append(text[at:])
    return "".join(out)


def shifted_links(text: str, spans: Sequence[Match], links: Links) -> Links:
    """Whitespace-word links of `text` as they stand once `spans` are annotated: a source word
    after an annotation moves by the annotation's words, which get no link themselves."""
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    added = np.zeros(len(ends) + 1, dtype=np.int64)
    for _, end, target in spans:
        holder = bisect.bisect_left(ends, end)  # the word the term ends in
        added[holder + 1] += 2 + len(target.split())
    shift = np.cumsum(added)
    return [(i + int(shift[i]), j) for i, j in links if i < len(ends)]


def annotate_pair(
    src: str, tgt: str, links: Links | None, terms: TermDictionary, rng: np.random.Generator
) -> tuple[str, Links | None] | None:
    """The source with some of the dictionary terms found in the pair annotated (each with
    probability KEEP_EACH, at least one) and its word links shifted; None when none is found."""
    found = terms.matches(src, tgt)
    if not found:
        return None
    keep = rng.random(len(found)) < KEEP_EACH
    if not keep.any():
        keep[int(rng.integers(len(found)))] = True
    spans = [m for m, kept in zip(found, keep) if kept]
    return annotate(src, spans), None if links is None else shifted_links(src, spans, links)


def keeps_markers(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer keeps each term marker as one piece (trained with terms > 0)."""
    pieces = tokenizer.src_pieces(tokenizer.encode_src([" ".join(TERM_SYMBOLS)])[0])
    return all(pieces.count(marker) == 1 for marker in TERM_SYMBOLS)


def without_annotations(pieces: list[str]) -> list[str]:
    """Source pieces with each annotation (`<t>` to `</t>`, and a bare "▁" before it) made
    empty, so that words count as in the source before it was annotated."""
    out, inside = list(pieces), False
    for i, piece in enumerate(pieces):
        if piece == TERM_OPEN:
            inside = True
            if i and pieces[i - 1] == "▁":
                out[i - 1] = ""
        if inside:
            out[i] = ""
        inside = inside and piece != TERM_CLOSE
    return out
