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
import math
import re
from collections import Counter
from dataclasses import dataclass

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import padding_mask
from seq2seq.data.tokenizer import word_starts
from seq2seq.decode.alignment import batch_key, replay, word_alignment
from seq2seq.decode.glossary import occurrences
from seq2seq.decode.hypothesis import Hypothesis, length_penalty
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

log = logging.getLogger(__name__)

INSERT_LEADS = ("", "de ")  # before an inserted term ("le" measured no better)


@dataclass
class PlacedHypothesis(Hypothesis):
    """A plain hypothesis with terms placed in it: rescored, and the (source word, output word)
    links of each placed term, which alignments and markup keep."""

    links: tuple[tuple[int, int], ...] = ()


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


class EncoderMemo:
    """Each source's encoder output, computed once for the passes placing makes over it (the
    alignment, the model's choices, the final scores) instead of once a pass."""

    def __init__(self, model, pad_id: int):
        self.model, self.pad_id = model, pad_id
        self.rows: dict[tuple[int, ...], torch.Tensor] = {}

    def seed(self, src: torch.Tensor, ids: list[list[int]], memory: torch.Tensor | None) -> None:
        """Keep the rows of a batch already encoded (`memory` of `src`, rows `ids`), if any."""
        for b, seq in enumerate(ids if memory is not None else []):
            self.rows.setdefault(tuple(seq), memory[b, : len(seq)])

    def memory(self, src: torch.Tensor, ids: list[list[int]]) -> torch.Tensor:
        """The encoder output [B, S, d] of the padded batch `src` (rows: `ids`)."""
        keys = [tuple(seq) for seq in ids]
        new = [k for k in dict.fromkeys(keys) if k not in self.rows]
        if new:
            at = [keys.index(k) for k in new]
            sub = src[at]
            for k, row in zip(new, self.model.encode(sub, padding_mask(sub, self.pad_id))):
                self.rows[k] = row[: len(k)]
        first = self.rows[keys[0]]
        out = first.new_zeros((src.size(0), src.size(1), first.size(-1)))
        for b, k in enumerate(keys):  # padded positions stay zero: the mask hides them
            out[b, : len(k)] = self.rows[k]
        return out


class TermPlacer:
    """Places a translator's missing terms (`translator`: its model, tokenizer, batched engine,
    guided head and target language) with the training data's `lexicon`."""

    def __init__(self, translator, lexicon: TermLexicon | None):
        self.translator, self.lexicon = translator, lexicon
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
        if kept:  # the plain search's encoder outputs (`encoder_outputs_kept`), by its batches
            for chunk, src in self.translator.batched([s.ids for s in segments], options):
                memo.seed(src, [segments[j].ids for j in chunk], kept.get(batch_key(src)))
        links = self._links(
            [segments[j] for j, *_ in todo], [found[j][0] for j, *_ in todo], options, memo
        )
        done = []
        for (j, text, missing), pairs in zip(todo, links):
            placed = self._place_one(segments[j], text, missing, pairs, options, memo)
            if placed is None:
                fallback.append(j)
            else:
                done.append((j, *placed))
        rescored = self._rescored([segments[j] for j, *_ in done], done, options, memo)
        for (j, *_), hyp in zip(done, rescored):
            found[j] = [hyp, *found[j][1:]]
        stats["placed"] += len(done)
        stats["inserted"] += sum(inserted for *_, inserted in done)
        stats["fallback"] += len(fallback)
        return sorted(fallback)

    def _links(
        self, segments, hyps: list[Hypothesis], options, memo: EncoderMemo | None = None
    ) -> list[set[tuple[int, int]]]:
        """Each hypothesis's (source word, output word) alignment, from the guided-alignment
        head where the run has one, else every decoder layer's attention."""
        t = self.translator
        if not segments:
            return []
        n_layers = len(t.model.decoder_layers)
        layers, head = (
            (list(range(n_layers)), None)
            if t.guided_head is None
            else ([t.guided_head[0]], t.guided_head[1])
        )
        specials = set(t.tokenizer.tgt_pieces([t.tokenizer.ids.eos, t.tokenizer.ids.pad]))
        specials |= set(t.tokenizer.src_pieces([t.tokenizer.ids.eos, t.tokenizer.ids.pad]))
        out: list[set[tuple[int, int]]] = [set() for _ in segments]
        for chunk, src in t.batched([s.ids for s in segments], options):
            tgt = [[*hyps[j].tokens, t.tokenizer.ids.eos] for j in chunk]
            found = replay(
                t.model,
                src,
                tgt,
                layers=layers,
                head=head,
                log_probs=False,
                special=t.tokenizer.ids,
                memory=None if memo is None else memo.memory(src, [segments[j].ids for j in chunk]),
            )
            for j, r, ids in zip(chunk, found, tgt):
                src_words = word_starts(t.tokenizer.src_pieces(segments[j].ids), specials | {""})
                tgt_words = word_starts(t.tokenizer.tgt_pieces(ids), specials)
                out[j] = set(word_alignment(r.attention, src_words, tgt_words))
        return out

    def _place_one(self, seg, text: str, missing: list[Hit], links, options, memo=None):
        """(the text with every missing term placed and repaired, the placed terms' links), or
        None when a term's span is not found."""
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
        choose, written_at, plain = self._chooser(seg.ids, options, memo), [], text
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
        options = [(at, lead) for at in points for lead in INSERT_LEADS]
        texts = []
        for at, lead in options:
            left, right = _around(text, at)
            texts.append(left + lead + hit.target + right)
        return options[choose(texts)]

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

    def _chooser(self, src_ids: list[int], options, memo: EncoderMemo | None = None):
        """The model's choice among candidate texts: the highest teacher-forced log-probability."""

        def choose(texts: list[str]) -> int:
            if len(texts) < 2:
                return 0
            # The candidates' shared first tokens score alike in each: only the rest is scored.
            ids = self.translator.tokenizer.encode_tgt(texts)
            shared = _shared_prefix(ids)
            scores = self.pair_log_probs([list(src_ids)] * len(texts), texts, options, memo, shared)
            return max(range(len(texts)), key=lambda i: scores[i])

        return choose

    def log_probs(self, src_ids: list[int], texts: list[str], options, memo=None) -> list[float]:
        """Each text's log-probability as the translation of one source, EOS included."""
        memo = memo or EncoderMemo(self.translator.model, self.translator.tokenizer.ids.pad)
        return self.pair_log_probs([list(src_ids)] * len(texts), texts, options, memo)

    def pair_log_probs(
        self,
        sources: list[list[int]],
        texts: list[str],
        options,
        memo: EncoderMemo | None = None,
        scored_from: int = 0,
    ) -> list[float]:
        """Each text's log-probability as the translation of its source, EOS included, in
        the translator's batches (from its token `scored_from` on)."""
        t = self.translator
        tgt = (
            [[*ids, t.tokenizer.ids.eos] for ids in t.tokenizer.encode_tgt(texts)] if texts else []
        )
        # A text longer than the model's positions cannot be its output.
        fits = [j for j, ids in enumerate(tgt) if len(ids) <= t.model.cfg.max_positions]
        out = [-math.inf] * len(texts)
        for chunk, src in t.batched([sources[j] for j in fits], options):
            chunk = [fits[j] for j in chunk]
            found = replay(
                t.model,
                src,
                [tgt[j] for j in chunk],
                layers=[],
                log_probs=True,
                special=t.tokenizer.ids,
                memory=None if memo is None else memo.memory(src, [sources[j] for j in chunk]),
                scored_from=scored_from,
            )
            for j, r in zip(chunk, found):
                out[j] = float(sum(r.log_probs))
        return out

    def _rescored(self, segments, placed, options, memo=None) -> list[PlacedHypothesis]:
        """Each placed text (`placed`: (segment index, text, links, inserted)) as a hypothesis:
        its tokens, scored teacher-forced on its segment's source, all in one pass."""
        texts = [text for _, text, *_ in placed]
        scores = self.pair_log_probs([s.ids for s in segments], texts, options, memo)
        tokens = self.translator.tokenizer.encode_tgt(texts) if texts else []
        out = []
        for ids, lp, (_, _, links, _) in zip(tokens, scores, placed):
            norm = length_penalty(len(ids) + 1, options.length_penalty, options.length_norm)
            out.append(PlacedHypothesis(ids, lp / norm, lp, links=tuple(links)))
        return out


def _shared_prefix(seqs: list[list[int]]) -> int:
    """How many first tokens every sequence shares."""
    n = min(map(len, seqs), default=0)
    return next((i for i in range(n) if len({seq[i] for seq in seqs}) > 1), n)


def _around(text: str, at: int) -> tuple[str, str]:
    """The text before and after an insertion at `at`, spaced for a word put between them."""
    left, right = text[:at], text[at:]
    return (left, " " + right) if left.endswith(" ") else (left + " ", right)


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
