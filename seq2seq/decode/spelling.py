"""How target terms are written in tokens, for constrained search: glued spellings, cut words,
sentence ends, worked out once per tokenizer and device and per term across batches."""

from __future__ import annotations

from functools import cached_property

import torch

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.constrained import Spellings

# Where a word is written glued onto the one before it ("l'hôtel", "l’hôtel", "bouton-poussoir"),
# the tokenizer cuts a term without its leading "▁"; the search counts that spelling too.
GLUE_CONTEXTS = ("'", "’", "-")
FINAL_MARKS = ".!?…"  # pieces made of these end a sentence
GLUED_CACHE = 65_536  # terms whose glued spellings a translator remembers (a server's many)

Term = tuple[int, ...]


class TermSpelling:
    """A tokenizer's vocabulary masks on one device, computed once, and each term's glued
    spellings and cut words, remembered across batches (at most GLUED_CACHE terms)."""

    def __init__(self, tokenizer: Tokenizer, device: torch.device):
        self.tokenizer, self.device = tokenizer, device
        self.known: dict[Term, tuple[tuple[Term, ...], dict[Term, tuple[bool, ...]]]] = {}

    @cached_property
    def glue(self) -> torch.Tensor:
        """Target pieces that continue the word before them (no "▁", a letter or digit
        first): constrained search keeps them from right after a term."""
        return self._mask(lambda p: not p.startswith("▁") and p[:1].isalnum())

    @cached_property
    def opens(self) -> torch.Tensor:
        """Target pieces that end without a letter or digit, so a word may start right after
        them ("'" in "l'hôtel"): where a glued spelling of a term counts."""
        return self._mask(lambda p: not (p[-1:].isalnum() or p[-1:] == "_"))

    @cached_property
    def final(self) -> torch.Tensor:
        """Target pieces that end a sentence: ".", "!", "?", "…" (with or without "▁")."""
        return self._mask(_is_final)

    def spellings(self, terms: set[Term], src: torch.Tensor) -> Spellings:
        """How a batch's `terms` are written (glued spellings, where a word is cut) and where
        its source sentences end."""
        if len(self.known) > GLUED_CACHE:
            self.known.clear()
        for term in terms - self.known.keys():
            glued = glued_spellings(self.tokenizer, term)
            self.known[term] = glued, {t: cut_words(self.tokenizer, t) for t in (term, *glued)}
        stay = {t: flags for term in terms for t, flags in self.known[term][1].items()}
        ends = tuple(inner_ends(self.tokenizer, row) for row in src.tolist())
        glued = {t: self.known[t][0] for t in terms}
        return Spellings(glued, self.opens, stay, self.final, ends)

    def _mask(self, test) -> torch.Tensor:
        mask = [test(p) for p in self.tokenizer.tgt_vocabulary()]
        return torch.tensor(mask, dtype=torch.bool, device=self.device)


def cut_words(tokenizer: Tokenizer, spelling: Term) -> tuple[bool, ...]:
    """Per position j of a term's spelling, whether its first j tokens end inside a word or
    on a sign that glues the next word on ("bouton-", "bouton-p" of "bouton-poussoir"), where
    leaving the term would leave a fragment; not at a word's end ("bouton") or a lone "▁"."""
    pieces = tokenizer.tgt_pieces(list(spelling))
    flags = [False]
    for before, after in zip(pieces, pieces[1:]):
        word_end = before[-1:].isalnum() and not after[:1].isalnum()
        flags.append(not (before == "▁" or after.startswith("▁") or word_end))
    return tuple(flags)


def _is_final(piece: str) -> bool:
    text = piece.replace("▁", "")
    return bool(text) and all(ch in FINAL_MARKS for ch in text)


def inner_ends(tokenizer: Tokenizer, ids: list[int]) -> int:
    """How many sentence ends a source holds before its last words (0 for one sentence)."""
    special = {tokenizer.ids.pad, tokenizer.ids.eos}
    pieces = tokenizer.src_pieces([i for i in ids if i not in special])
    ends, words_after = 0, False
    for piece in reversed(pieces):
        if _is_final(piece) and words_after:
            ends += 1
        words_after = words_after or any(ch.isalnum() for ch in piece)
    return ends


def glued_spellings(tokenizer: Tokenizer, term: Term) -> tuple[Term, ...]:
    """A term's other segmentations: as the tokenizer cuts it right after an apostrophe or a
    hyphen, without the leading "▁" ("hôtel" alone is "▁", "hôtel"; in "l'hôtel", "hôtel")."""
    (text,) = tokenizer.decode_tgt([list(term)])
    found: list[Term] = []
    contexts = tokenizer.encode_tgt([c + text for c in GLUE_CONTEXTS])
    for context, ids in zip(GLUE_CONTEXTS, contexts):
        pieces = tokenizer.tgt_pieces(ids)
        for cut in range(1, len(pieces)):
            head = "".join(pieces[:cut]).replace("▁", " ").strip()
            if len(head) >= len(context):
                tail = tuple(ids[cut:])
                fits = head == context and not pieces[cut].startswith("▁")
                if fits and tail != term and tail not in found and tokenizer.ids.unk not in tail:
                    found.append(tail)
                break
    return tuple(found)
