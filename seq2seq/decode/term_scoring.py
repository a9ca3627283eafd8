"""The model's view of texts placing writes (term mode `place`): the alignment of a plain
output to its source, the teacher-forced log-probability of candidate texts (the choices the
repair leaves to the model, and the final text's score), each source encoded once for them
all (EncoderMemo)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from seq2seq.data.batching import padding_mask
from seq2seq.data.tokenizer import word_starts
from seq2seq.decode.alignment import replay, word_alignment
from seq2seq.decode.hypothesis import Hypothesis, length_penalty

# A choice scores its candidates up to this many tokens into the end they share: the model's
# view of the words after a change fades fast, and the rest of the sentence was a third of
# placing's time (the final text is scored whole).
CHOICE_WINDOW = 4


@dataclass
class PlacedHypothesis(Hypothesis):
    """A plain hypothesis with terms placed in it: rescored, and the (source word, output word)
    links of each placed term, which alignments and markup keep."""

    links: tuple[tuple[int, int], ...] = ()


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


class TermScorer:
    """Alignments and teacher-forced scores of texts on a translator's model (its tokenizer,
    batched engine and guided head)."""

    def __init__(self, translator):
        self.translator = translator

    def links(
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

    def chooser(self, src_ids: list[int], options, memo: EncoderMemo | None = None):
        """The model's choice among candidate texts: the highest teacher-forced log-probability."""

        def choose(texts: list[str]) -> int:
            if len(texts) < 2:
                return 0
            # The candidates' shared first tokens score alike in each: only the rest is
            # scored, up to CHOICE_WINDOW tokens into the end they share.
            ids = self.translator.tokenizer.encode_tgt(texts)
            shared = _shared_prefix(ids)
            ends = _shared_prefix([seq[::-1] for seq in ids])
            tail = max(0, min(ends, min(map(len, ids)) - shared) - CHOICE_WINDOW)
            scores = self.pair_log_probs(
                [list(src_ids)] * len(texts), texts, options, memo, shared, tail
            )
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
        tail: int = 0,
    ) -> list[float]:
        """Each text's log-probability as the translation of its source, EOS included, in
        the translator's batches (from its token `scored_from` on; without its last `tail`
        tokens and EOS when `tail` > 0: a choice's window)."""
        t = self.translator
        ids = t.tokenizer.encode_tgt(texts) if texts else []
        tgt = [seq[: len(seq) - tail] if tail else [*seq, t.tokenizer.ids.eos] for seq in ids]
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

    def rescored(self, segments, placed, options, memo=None) -> list[PlacedHypothesis]:
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
