"""Translate, align, put markup back: the one path from prepared lines to annotated
translations, for `translate` (alignments, scores, token probabilities, --tags) and for the
server's `format` requests. The search runs through the translator's batched engine, and the
best hypotheses are replayed once for their attention (alignment.py), which places the markup
(markup.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.term_annotation import without_annotations
from seq2seq.data.tokenizer import word_starts
from seq2seq.decode.alignment import (
    DEFAULT_LAYER,
    Replayed,
    batch_key,
    encoder_outputs_kept,
    pharaoh,
    replay,
    word_alignment,
)
from seq2seq.decode.hypothesis import Hypothesis
from seq2seq.decode.markup import MalformedMarkup, parse, reinsert
from seq2seq.decode.segments import Source, flatten
from seq2seq.decode.translator import Translator, joined_hypothesis
from seq2seq.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Annotation:
    """What to add to each translation."""

    alignments: bool = False
    token_probs: bool = False
    layer: int | None = (
        DEFAULT_LAYER  # decoder layer that aligns (negative: from the top; None: all)
    )
    head: int | None = None  # that layer's head that aligns (None: all, averaged)


@dataclass
class Annotated:
    """One output line with what was asked for: the alignment (source word, output word) pairs
    and the probability of each output token (each sentence's EOS included)."""

    text: str
    score: float
    alignment: list[tuple[int, int]] | None = None
    token_probs: list[float] | None = None


def replay_segments(
    translator: Translator,
    ids: list[list[int]],
    hyps: list[Hypothesis],
    annotation: Annotation,
    kept: dict[tuple, torch.Tensor] | None = None,
    options: DecodeConfig | None = None,
) -> list[Replayed]:
    """`replay` over many (source, best hypothesis) segments, in the batches `options` (the
    translator's by default) make (`kept`: their encoder outputs, from `encoder_outputs_kept`)."""
    special = translator.tokenizer.ids
    layers, head = _replayed_layers(translator, annotation)
    out: list[Replayed | None] = [None] * len(ids)
    for chunk, src in translator.batched(ids, options):
        tgt = [[*hyps[j].tokens, special.eos] for j in chunk]
        found = replay(
            translator.model,
            src,
            tgt,
            layers=layers,
            head=head,
            log_probs=annotation.token_probs,
            special=special,
            memory=(kept or {}).get(batch_key(src)),
        )
        for j, r in zip(chunk, found):
            out[j] = r
    return out  # type: ignore[return-value]


def _replayed_layers(translator: Translator, annotation: Annotation):
    """The decoder layers whose attention aligns, and the head (None: all, averaged)."""
    n_layers = len(translator.model.decoder_layers)
    layer, head = annotation.layer, annotation.head
    if layer is None and translator.guided_head is not None:
        layer, head = translator.guided_head  # the head trained to align, unless told otherwise
    if layer is not None and not -n_layers <= layer < n_layers:
        raise UserError(
            f"alignment layer {layer}: the model has {n_layers} decoder layers "
            f"(0 to {n_layers - 1}, or -1 to -{n_layers} from the top)"
        )
    every = list(range(n_layers)) if layer is None else [layer]
    return (every if annotation.alignments else []), head


def annotate(
    translator: Translator, lines: list[str], annotation: Annotation, first_line: int = 0
) -> list[Annotated]:
    """The best translation of each line, scored, with the alignment and token probabilities
    `annotation` asks for (a line split into sentences: theirs, joined)."""
    return annotate_sources(
        translator, translator.prepare(lines, first_line=first_line), annotation
    )


def annotate_sources(
    translator: Translator,
    sources: list[Source],
    annotation: Annotation,
    wanted: Callable[[int], bool] | None = None,
    options: DecodeConfig | None = None,
) -> list[Annotated]:
    """`annotate` of lines already prepared (`Translator.prepare`'s Sources); `wanted` and
    `options`: as `Translator.translate_sources` (lines given up on come back empty)."""
    lines, options = sources, options or translator.options  # one output a source
    segments = flatten(sources)
    ids = [s.ids for s in segments]
    extra = annotation.alignments or annotation.token_probs
    keep = encoder_outputs_kept(translator.model) if extra else nullcontext({})
    with keep as kept:
        hyps = [found[0] for found in translator.search(segments, wanted, options)]
    replayed = (
        replay_segments(translator, ids, hyps, annotation, kept, options) if extra and ids else []
    )
    by_line: dict[int, list[int]] = {}
    for j, segment in enumerate(segments):
        by_line.setdefault(segment.owner, []).append(j)
    out = [
        Annotated("", 0.0, [] if annotation.alignments else None, [] if extra else None)
        for _ in lines
    ]
    # Decoded together: one call for the chunk, not one a line.
    texts = translator.tokenizer.decode_tgt(
        [[t for j in segs for t in hyps[j].tokens] for segs in by_line.values()]
    )
    for (i, segs), text in zip(by_line.items(), texts):
        out[i] = _line(
            translator,
            options,
            " ".join(text.split()),
            [ids[j] for j in segs],
            [hyps[j] for j in segs],
            [replayed[j] for j in segs] if replayed else None,
            annotation,
        )
    if not annotation.token_probs:
        for a in out:
            a.token_probs = None
    return out


def _line(
    translator,
    options: DecodeConfig,
    text: str,
    ids: list[list[int]],
    hyps: list[Hypothesis],
    replayed: list[Replayed] | None,
    annotation: Annotation,
) -> Annotated:
    """One line's annotated translation (`text`, decoded) from its segments' hypotheses."""
    score = (
        hyps[0].score if len(hyps) == 1 else joined_hypothesis([[h] for h in hyps], options).score
    )
    result = Annotated(text, score)
    if replayed is None:
        return result
    if annotation.token_probs:
        result.token_probs = [math.exp(lp) for r in replayed for lp in r.log_probs or []]
    if annotation.alignments:
        result.alignment = _joined_alignment(translator, ids, hyps, replayed)
    return result


def _joined_alignment(translator, ids, hyps, replayed) -> list[tuple[int, int]]:
    """Word pairs of a line from its segments': words are counted over the whole line, as the
    joined translation decodes (a segment may begin inside its predecessor's last word)."""
    tok, specials = translator.tokenizer, _specials(translator.tokenizer)
    tgt_ids = [[*h.tokens, tok.ids.eos] for h in hyps]
    # Words of the source as given: a glossary's annotations (--term-mode annotate) are none.
    src_pieces = without_annotations([p for seq in ids for p in tok.src_pieces(seq)])
    src_words = word_starts(src_pieces, specials | {""})
    tgt_words = word_starts([p for seq in tgt_ids for p in tok.tgt_pieces(seq)], specials)
    pairs: set[tuple[int, int]] = set()
    src_at = tgt_at = 0  # the segment's first piece in the line
    for seq, tgt, r, h in zip(ids, tgt_ids, replayed, hyps):
        seg_src, seg_tgt = (
            src_words[src_at : src_at + len(seq)],
            tgt_words[tgt_at : tgt_at + len(tgt)],
        )
        found = set(word_alignment(r.attention, seg_src, seg_tgt))
        pairs.update(_with_placed_links(found, getattr(h, "links", ()), seg_src, seg_tgt))
        src_at, tgt_at = src_at + len(seq), tgt_at + len(tgt)
    return sorted(pairs)


def _with_placed_links(found: set, links, seg_src: list[int], seg_tgt: list[int]) -> set:
    """A segment's alignment with the links of the terms placed in it (term mode place: a
    placed term aligns to its source term, and only to it) in place of those its words had."""
    if not links:
        return found
    s0 = min((w for w in seg_src if w >= 0), default=0)
    t0 = min((w for w in seg_tgt if w >= 0), default=0)
    placed = {(i + s0, j + t0) for i, j in links}
    sources, targets = {i for i, _ in placed}, {j for _, j in placed}
    return {(i, j) for i, j in found if i not in sources and j not in targets} | placed


def _specials(tokenizer) -> set[str]:
    ids = tokenizer.ids
    found = tokenizer.tgt_pieces([ids.eos, ids.pad]) + tokenizer.src_pieces([ids.eos, ids.pad])
    return set(found)


def render(annotated: Annotated, *, alignments: bool, scores: bool, token_probs: bool) -> str:
    """One output line: the translation, then ` ||| `-separated fields in this order: the
    alignment, the score, the token probabilities (each only when asked for)."""
    fields = [annotated.text]
    if alignments:
        fields.append(pharaoh(annotated.alignment or []))
    if scores:
        fields.append(f"{annotated.score:.4f}")
    if token_probs:
        fields.append(" ".join(f"{p:.4f}" for p in annotated.token_probs or []))
    return " ||| ".join(fields)


@dataclass(frozen=True)
class OutputFields:
    """What `translate` prints after each translation, and whether lines carry markup."""

    alignments: bool = False
    scores: bool = False
    token_probs: bool = False
    layer: int | None = DEFAULT_LAYER
    tags: str | None = None  # "html" or "xml": put the line's markup back into its translation

    @property
    def plain(self) -> bool:
        """Nothing beyond the translation itself."""
        return not (self.alignments or self.scores or self.token_probs or self.tags)


def render_lines(
    translator: Translator, lines: list[str], fields: OutputFields, first_line: int = 0
) -> list[str]:
    """Each line's output as `fields` asks: the translation (tags put back), then its
    alignment, score and token probabilities, ` ||| `-separated."""
    annotation = Annotation(
        alignments=fields.alignments or fields.tags is not None,
        token_probs=fields.token_probs,
        layer=fields.layer,
    )
    if fields.tags is None:
        found = annotate(translator, lines, annotation, first_line)
    else:
        found = translate_tagged(translator, lines, annotation, fields.tags, first_line)
    return [
        render(
            a, alignments=fields.alignments, scores=fields.scores, token_probs=fields.token_probs
        )
        for a in found
    ]


def translate_tagged(
    translator: Translator, lines: list[str], annotation, fmt: str, first_line: int = 0
) -> list:
    """Translate lines that carry markup (an alignment is needed, so `annotation` must ask for
    one): each Annotated's text has the markup put back; the alignment stays that of the plain
    text. A malformed line is translated as it is, with a warning."""
    plain, marked = [], []
    for n, line in enumerate(lines, first_line + 1):
        try:
            m = parse(line, fmt)
        except MalformedMarkup as e:
            log.warning("line %d: malformed markup (%s); translated as plain text", n, e)
            m = None
        marked.append(m)
        plain.append(line if m is None else m.text)
    found = annotate(translator, plain, annotation, first_line)
    for m, a in zip(marked, found):
        if m is not None:  # its words escaped, and its markup (if any) put back
            a.text = reinsert(m, a.text, a.alignment or [])
    return found


def translate_sources(
    translator: Translator,
    sources: list[Source],
    wanted: Callable[[int], bool] | None = None,
    options: DecodeConfig | None = None,
) -> list[list[tuple[str, float]]]:
    """`Translator.translate_sources`, with each source's markup (serve's `format`) put back
    around the words aligned to the words it wrapped (a batch holding markup is aligned whole)."""
    if all(source.marked is None for source in sources):
        return translator.translate_sources(sources, wanted, options)
    found = annotate_sources(translator, sources, Annotation(alignments=True), wanted, options)
    return [
        [(a.text if s.marked is None else reinsert(s.marked, a.text, a.alignment or []), a.score)]
        for s, a in zip(sources, found)
    ]
