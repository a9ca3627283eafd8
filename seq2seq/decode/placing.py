"""Term mode `place`: the plain beam's translation kept where it holds its terms; elsewhere each
missing term is put where its source term was translated (term_place.py), the grammar around it
repaired (term_repair.py, the model choosing where the table cannot), and the final text scored
teacher-forced, so its score, alignment and token probabilities are those of what is printed.
A term whose concept the output dropped (no span translates it) is put in where the model
scores it best near its aligned words: on the preferred-glossary benchmark the constrained beam
drifted on each of the 25 segments it was then given (length, repeats, terms piled at the end).
A segment whose term can neither be placed nor put in (no point, a repair the model cannot
spell) is left to the constrained beam (the caller's fallback)."""

from __future__ import annotations

import logging
import re
from collections import Counter

from seq2seq.config import DecodeConfig
from seq2seq.decode.alignment import batch_key
from seq2seq.decode.glossary import occurrences
from seq2seq.decode.hypothesis import Hypothesis
from seq2seq.decode.term_lexicon import TermLexicon
from seq2seq.decode.term_place import (
    Hit,
    Span,
    insertion_points,
    locate,
    same_word,
    source_words,
    whitespace_index,
    written,
)
from seq2seq.decode.term_place import is_plural as plural_span
from seq2seq.decode.term_repair import Placed, repaired, table_for
from seq2seq.decode.term_scoring import EncoderMemo, TermScorer

log = logging.getLogger(__name__)

INSERT_LEADS = ("", "de ")  # before an inserted term ("le" measured no better)


def missing_hits(hits: tuple[Hit, ...], text: str) -> list[Hit]:
    """The hits whose target term `text` lacks (a term needed n times and held m < n times:
    its last n − m hits)."""
    wanted = Counter(h.target for h in hits)
    out = []
    for target, n in wanted.items():
        have = occurrences(target, text)
        if have < n:
            out.extend([h for h in hits if h.target == target][have:])
    return sorted(out, key=lambda h: h.start)


class TermPlacer:
    """Places a translator's missing terms (`translator`: its model, tokenizer, batched engine,
    guided head and target language) with the training data's `lexicon`."""

    def __init__(self, translator, lexicon: TermLexicon | None):
        self.translator, self.lexicon = translator, lexicon
        self.scorer = TermScorer(translator)
        self.table = table_for(translator.tgt_lang or "")

    def place(
        self, segments, found: list[list[Hypothesis]], options: DecodeConfig, kept=None
    ) -> list[int]:
        """Replace, in `found` (each segment's plain n-best), the best hypothesis of each
        segment that lacks a term by one with the terms placed; the segments whose terms could
        not be placed (or have no source terms: given constraints) are returned. `kept`: the
        plain search's encoder outputs by batch, read instead of encoding again."""
        tok, stats = self.translator.tokenizer, self.translator.term_stats
        todo, fallback = [], []
        for j, seg in enumerate(segments):
            if not seg.terms:
                continue
            if not seg.hits:
                fallback.append(j)
                continue
            (text,) = tok.decode_tgt([found[j][0].tokens])
            missing = missing_hits(seg.hits, " ".join(text.split()))
            if missing:
                todo.append((j, " ".join(text.split()), missing))
            else:
                stats["held"] += 1
        memo = EncoderMemo(self.translator.model, tok.ids.pad)
        if kept and todo:  # the plain search's encoder outputs, by its batches
            for chunk, src in self.translator.batched([s.ids for s in segments], options):
                memo.seed(src, [segments[j].ids for j in chunk], kept.get(batch_key(src)))
        links = self.scorer.links(
            [segments[j] for j, *_ in todo], [found[j][0] for j, *_ in todo], options, memo
        )
        done = []
        for (j, text, missing), pairs in zip(todo, links):
            placed = self._place_one(segments[j], text, missing, pairs, options, memo)
            if placed is None:
                fallback.append(j)
            else:
                done.append((j, *placed))
        rescored = self.scorer.rescored([segments[j] for j, *_ in done], done, options, memo)
        for (j, *_), hyp in zip(done, rescored):
            found[j] = [hyp, *found[j][1:]]
        stats["placed"] += len(done)
        stats["inserted"] += sum(inserted for *_, inserted in done)
        stats["fallback"] += len(fallback)
        return sorted(fallback)

    def _place_one(self, seg, text: str, missing: list[Hit], links, options, memo=None):
        """(the text with every missing term placed or put in and repaired, the placed terms'
        links, whether a term was put in), or None when a term can be neither."""
        spans, taken = (
            [],
            [_span_of(text, h.target) for h in seg.hits if occurrences(h.target, text)],
        )
        taken = [s for s in taken if s is not None]
        unplaced = []
        for hit in missing:
            renderings = self._renderings(seg.source, hit)
            avoid = self._others(seg.source, hit, renderings)
            span = locate(text, seg.source, hit, renderings, links, taken, avoid)
            if span is None:
                unplaced.append(hit)
                continue
            spans.append((span, hit, renderings))
            taken.append((span.start, span.end))
        choose, written_at, plain = self.scorer.chooser(seg.ids, options, memo), [], text
        for hit in unplaced:  # the concept was dropped: the term goes in where the model likes
            at = self._insertion(seg, text, hit, links, taken, choose)
            if at is None:
                return None
            spans.append((Span(at[0], at[0], ()), hit, at[1]))
        for span, hit, renderings in sorted(spans, key=lambda s: -s[0].start):
            plural = hit.number == "pl" or (
                hit.number is None and span.end > span.start and plural_span(text, span, renderings)
            )
            term = written(hit.target, text, span, plural, self.table and self.table.plural)
            term = term if self._spells(term) else hit.target  # "P" of "Parc" may be no piece
            gender = hit.gender or (self.lexicon.gender(hit.target) if self.lexicon else None)
            number = "pl" if plural else "sg"
            if span.end > span.start:
                placed = Placed(text[: span.start], term, text[span.end :], gender, number)
            else:  # renderings: the determiner written before the inserted term
                left, right = _around(text, span.start)
                placed = Placed(left + renderings, term, right, gender, number)
            fixed = repaired(placed, self.table, choose, self._known)
            shift = len(fixed.text) - len(text)
            written_at = [(hit, len(fixed.left), term)] + [
                (h, at + shift, w) for h, at, w in written_at
            ]
            text = fixed.text
        if not self._spells(text) and self._spells(plain):
            return None  # a repair the model cannot write: the constrained beam instead
        return text, _placed_links(seg.source, text, written_at), bool(unplaced)

    def _insertion(self, seg, text: str, hit: Hit, links, taken, choose) -> tuple | None:
        """(where, the words before it) a dropped term goes in: of the insertion points
        around its aligned words, with or without a determiner or "de" before it, the one
        the model scores best; None when there is no point."""
        points = insertion_points(text, seg.source, hit, links, taken)
        if not points:
            return None
        # Where first, bare; then what goes before it there: len(points) + 2 texts scored
        # instead of 2·len(points) (the insertion choices were a quarter of placing's time).
        at = points[choose([_inserted(text, at, "", hit.target) for at in points])]
        leads = [_inserted(text, at, lead, hit.target) for lead in INSERT_LEADS]
        return at, INSERT_LEADS[choose(leads)]

    def _renderings(self, source: str, hit: Hit) -> list[str]:
        """The usual target words of a hit's source words, the source words themselves (names
        the model copies) and the target term's own words (the term written inflected)."""
        words = source[hit.start : hit.end]
        found = self.lexicon.renderings(words) if self.lexicon else []
        # A hyphenated term's parts too: "boîte de dialogue" becomes "boîte-dialogue" whole.
        parts = [w for w in re.split(r"[\s\-‐]+", hit.target.lower()) if w]
        return list(dict.fromkeys([*found, *words.lower().split(), *parts]))

    def _others(self, source: str, hit: Hit, renderings: list[str]) -> list[str]:
        """What the sentence's other source words are written as (their renderings, the words
        copied): an output word that is one of them translates them, not the term."""
        rest = source[: hit.start] + " " + source[hit.end :]
        found = self.lexicon.renderings(rest) if self.lexicon else []
        words = [w for w in rest.lower().split() if len(w) >= 3]
        # Not one of the term's own renderings inflected: "dialogs" elsewhere in the sentence
        # must not bar "dialogue" from the span of "dialog".
        own = [w for w in dict.fromkeys([*found, *words]) if w not in renderings]
        return [w for w in own if not any(same_word(w, r) for r in renderings)]

    def _known(self, word: str) -> bool:
        """Whether the model knows a word form: seen in its training text, else one piece."""
        if self.lexicon is not None and self.lexicon.knows(word):
            return True
        (ids,) = self.translator.tokenizer.encode_tgt([word])
        return len(ids) == 1 and ids[0] != self.translator.tokenizer.ids.unk

    def _spells(self, text: str) -> bool:
        """Whether the model can write `text` (no piece outside its vocabulary)."""
        (ids,) = self.translator.tokenizer.encode_tgt([text])
        return self.translator.tokenizer.ids.unk not in ids


def _around(text: str, at: int) -> tuple[str, str]:
    """The text before and after an insertion at `at`, spaced for a word put between them."""
    left, right = text[:at], text[at:]
    return (left, " " + right) if left.endswith(" ") else (left + " ", right)


def _inserted(text: str, at: int, lead: str, term: str) -> str:
    """`text` with `lead` and `term` put in at `at`."""
    left, right = _around(text, at)
    return left + lead + term + right


def _span_of(text: str, term: str) -> tuple[int, int] | None:
    """Characters of the first whole-word occurrence of `term` in `text`."""
    at = 0
    while (at := text.find(term, at)) >= 0:
        if occurrences(term, text[max(0, at - 1) : at + len(term) + 1]):
            return at, at + len(term)
        at += 1
    return None


def _placed_links(source: str, text: str, placed) -> list[tuple[int, int]]:
    """(source word, output word) pairs linking each placed term's words (`placed`: its hit,
    where it starts in `text`, as written) to its source term's."""
    links = set()
    for hit, at, term in placed:
        first = whitespace_index(text, at)
        out_words = range(first, first + len(term.split()))
        links.update((i, j) for i in source_words(source, hit) for j in out_words)
    return sorted(links)
