"""Word alignments and per-token probabilities of finished translations.

Search never keeps attention weights (SDPA does not return them, and carrying them through the
beam would cost every decode). When they are asked for, the best hypotheses are replayed once,
teacher-forced, in one parallel pass over the target (not one step per token): that pass gives
the decoder's cross-attention (every layer's averaged, or one chosen layer's; heads averaged)
and, if wanted, each output token's probability. Plain decoding is untouched.

Pieces are merged into words: a SentencePiece piece starting with `▁` begins a word, others
continue it. Word i of a source line is its i-th whitespace-separated word; word j of an output
line its j-th. Piece attention is summed into word attention; each output word's most attended
source word and each source word's most attending output word are symmetrised
(grow-diag-final-and) into the alignment, printed as Pharaoh `i-j` pairs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seq2seq.data.batching import pad, padding_mask
from seq2seq.data.tokenizer import SpecialIds, word_starts
from seq2seq.decode.hypothesis import Hypothesis, length_penalty
from seq2seq.errors import UserError
from seq2seq.model.cross_attention import explicit_cross_attention
from seq2seq.model.transformer import Transformer

# None: every decoder layer's attention, averaged. Chosen on /work/bench/enfr12 by
# scripts/bench_alignment.py (benchmarks/RESULTS-align.md): it agreed best with eflomal.
DEFAULT_LAYER = None


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


@dataclass
class Replayed:
    """A hypothesis replayed: cross-attention [T, S] (output pieces with EOS × source pieces
    with EOS) and the log-probability of each output piece."""

    attention: torch.Tensor | None
    log_probs: list[float] | None


def word_attention(
    attention: torch.Tensor, src_words: list[int], tgt_words: list[int]
) -> torch.Tensor:
    """Piece attention [T, S] as word attention [output words, source words]: an output word's
    rows averaged over its pieces, a source word's columns summed (special pieces left out)."""
    n_src, n_tgt = max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1
    src = torch.tensor(src_words[: attention.size(1)])
    tgt = torch.tensor(tgt_words[: attention.size(0)])
    # One-hot piece → word matrices; a special piece (-1) is the extra last column, cut off.
    cols = F.one_hot(src.where(src >= 0, n_src), n_src + 1)[:, :n_src].float()
    rows = F.one_hot(tgt.where(tgt >= 0, n_tgt), n_tgt + 1)[:, :n_tgt].float().T
    rows = rows / rows.sum(dim=1, keepdim=True).clamp(min=1.0)
    return rows @ attention.float() @ cols


def word_alignment(
    attention: torch.Tensor, src_words: list[int], tgt_words: list[int]
) -> list[tuple[int, int]]:
    """Sorted (source word, output word) pairs from a [T, S] piece attention matrix and the
    word index of each source and output piece (-1: not a word, such as EOS).

    Each output word's most attended source word and each source word's most attending output
    word are two one-directional alignments; they are symmetrised as statistical aligners' two
    directions are (grow-diag-final-and), which agreed best with eflomal (RESULTS-align.md).
    """
    # Word indices may start past 0 (a sentence inside a line): count from its first word.
    s0 = min((w for w in src_words if w >= 0), default=0)
    t0 = min((w for w in tgt_words if w >= 0), default=0)
    local_src = [w - s0 if w >= 0 else -1 for w in src_words]
    local_tgt = [w - t0 if w >= 0 else -1 for w in tgt_words]
    words = word_attention(attention, local_src, local_tgt)
    if words.numel() == 0:
        return []
    by_tgt = {(int(i), j) for j, i in enumerate(words.argmax(dim=1).tolist())}
    by_src = {(i, int(j)) for i, j in enumerate(words.argmax(dim=0).tolist())}
    return sorted((i + s0, j + t0) for i, j in grow_diag_final_and(by_tgt, by_src))


def grow_diag_final_and(forward: set, backward: set) -> set:
    """Koehn et al.'s symmetrisation of two directions' links, as fast_align's `atools -c
    grow-diag-final-and`: their intersection, grown by neighbouring links of their union that
    align a word not yet aligned, then union links whose words are both unaligned."""
    union, links = forward | backward, set(forward & backward)
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for di, dj in neighbours:
                cand = (i + di, j + dj)
                if cand in union and cand not in links:
                    if cand[0] not in src_done or cand[1] not in tgt_done:
                        links.add(cand)
                        src_done.add(cand[0])
                        tgt_done.add(cand[1])
                        grew = True
    for i, j in sorted(union):
        if i not in src_done and j not in tgt_done:
            links.add((i, j))
            src_done.add(i)
            tgt_done.add(j)
    return links


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """`0-0 1-2 …`, as fast_align and Marian print alignments."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


@torch.inference_mode()
def replay(
    model: Transformer,
    src: torch.Tensor,
    tgt: list[list[int]],
    *,
    layers: list[int],
    log_probs: bool,
    special: SpecialIds,
    memory: torch.Tensor | None = None,
    head: int | None = None,
) -> list[Replayed]:
    """Teacher-force each target (ids with EOS) on its padded source row: the cross-attention of
    the decoder `layers` (negative: from the top), averaged over their heads (or only `head`'s)
    and them (none: no attention), and, with `log_probs`, each target id's log-probability.
    `memory`: the batch's encoder output, if the search kept it."""
    n_layers = len(model.decoder_layers)
    for layer in layers:
        if not -n_layers <= layer < n_layers:
            raise ValueError(f"alignment layer {layer} is not one of the {n_layers} decoder layers")
    chosen = {layer % n_layers for layer in layers}
    src_mask = padding_mask(src, special.pad)
    tgt_in = pad([[special.start, *t[:-1]] for t in tgt], pad_id=special.pad).to(src.device)
    if memory is None:
        memory = model.encode(src, src_mask)
    x = model.embed(model.tgt_embed, tgt_in)
    weights = None
    last = n_layers - 1 if log_probs else max(chosen, default=-1)
    for i, block in enumerate(model.decoder_layers[: last + 1]):
        if i not in chosen:  # causal mask alone: exact for every real (non-padding) position
            x = block(x, memory, src_mask, None)
            continue
        x, captured = _layer_with_attention(block, x, memory, src_mask)
        picked = captured.float().mean(dim=1) if head is None else captured[:, head].float()
        heads = picked / len(chosen)  # [B, T, S]
        weights = heads if weights is None else weights + heads
    weights = None if weights is None else weights.cpu()
    token_lp = None
    if log_probs:
        logits = model.logits(model.decoder_norm(x)).float()
        target = pad(tgt, pad_id=special.pad).to(src.device)
        token_lp = (logits.log_softmax(-1).gather(2, target.unsqueeze(2)).squeeze(2)).cpu()
    src_lens = src_mask.sum(1).tolist()
    return [
        Replayed(
            None if weights is None else weights[b, : len(t), : src_lens[b]],
            None if token_lp is None else token_lp[b, : len(t)].tolist(),
        )
        for b, t in enumerate(tgt)
    ]


def _layer_with_attention(block, x, memory, src_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's output (as its forward, causal) and its cross-attention [B, H, T, S]."""
    x = block.self_block(x, lambda h: block.self_attn(h, None, causal=True))
    captured = []

    def cross(h: torch.Tensor) -> torch.Tensor:
        y, w = explicit_cross_attention(block.cross_attn, h, memory, src_mask)
        captured.append(w)
        return y

    x = block.cross_block(x, cross)
    return block.ffn_block(x, block.ffn), captured[0]


@contextmanager
def encoder_outputs_kept(model: Transformer) -> Iterator[dict[tuple, torch.Tensor]]:
    """While it lasts, each batch the model encodes keeps its encoder output, by source ids, so
    that replaying the batch after search does not encode it again (a model used by one thread
    at a time, as the translator's is)."""
    kept: dict[tuple, torch.Tensor] = {}
    encode = model.encode

    def keeping(src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        memory = encode(src, src_mask)
        kept[_batch_key(src)] = memory
        return memory

    model.encode = keeping  # an instance attribute, shadowing the method until deleted
    try:
        yield kept
    finally:
        del model.encode


def _batch_key(src: torch.Tensor) -> tuple:
    return (tuple(src.shape), src.cpu().numpy().tobytes())


def replay_segments(
    translator,
    ids: list[list[int]],
    hyps: list[Hypothesis],
    annotation: Annotation,
    kept: dict[tuple, torch.Tensor] | None = None,
) -> list[Replayed]:
    """`replay` over many (source, best hypothesis) segments, in the translator's batches
    (`kept`: their encoder outputs, from `encoder_outputs_kept`)."""
    special = translator.tokenizer.ids
    out: list[Replayed | None] = [None] * len(ids)
    amp = (
        torch.autocast(translator.device.type, dtype=translator.amp_dtype)
        if translator.amp_dtype is not None
        else nullcontext()
    )
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
    layers = every if annotation.alignments else []
    was_training = translator.model.training
    translator.model.eval()
    try:
        for chunk in translator.batches(ids):
            src = pad([ids[j] for j in chunk], pad_id=special.pad).to(translator.device)
            tgt = [[*hyps[j].tokens, special.eos] for j in chunk]
            with amp:
                found = replay(
                    translator.model,
                    src,
                    tgt,
                    layers=layers,
                    head=head,
                    log_probs=annotation.token_probs,
                    special=special,
                    memory=(kept or {}).get(_batch_key(src)),
                )
            for j, r in zip(chunk, found):
                out[j] = r
    finally:
        translator.model.train(was_training)
    return out  # type: ignore[return-value]


def annotate(translator, lines: list[str], annotation: Annotation) -> list[Annotated]:
    """The best translation of each line, scored, with the alignment and token probabilities
    `annotation` asks for (a line split into sentences: theirs, joined)."""
    return annotate_sources(translator, translator.prepare(lines), annotation)


def annotate_sources(translator, sources: list, annotation: Annotation) -> list[Annotated]:
    """`annotate` of lines already prepared (`Translator.prepare`'s Sources)."""
    lines = sources  # one output a source
    ids, owner, terms, firsts = [], [], [], []
    for i, source in enumerate(sources):
        ids += [list(seq) for seq in source.segments]
        owner += [i] * len(source.segments)
        terms += list(source.constraints) or [()] * len(source.segments)
        firsts += [source.first] * len(source.segments)
    extra = annotation.alignments or annotation.token_probs
    keep = encoder_outputs_kept(translator.model) if extra else nullcontext({})
    with keep as kept:
        hyps = [found[0] for found in translator.search(ids, owner, terms, firsts)]
    replayed = replay_segments(translator, ids, hyps, annotation, kept) if extra and ids else []
    by_line: dict[int, list[int]] = {}
    for j, i in enumerate(owner):
        by_line.setdefault(i, []).append(j)
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
    text: str,
    ids: list[list[int]],
    hyps: list[Hypothesis],
    replayed: list[Replayed] | None,
    annotation: Annotation,
) -> Annotated:
    """One line's annotated translation (`text`, decoded) from its segments' hypotheses."""
    if len(hyps) == 1:
        score = hyps[0].score
    else:
        d = translator.decode
        log_prob = sum(h.log_prob for h in hyps)
        length = sum(len(h.tokens) + 1 for h in hyps)
        score = log_prob / length_penalty(length, d.length_penalty, d.length_norm)
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
    src_words = word_starts([p for seq in ids for p in tok.src_pieces(seq)], specials)
    tgt_words = word_starts([p for seq in tgt_ids for p in tok.tgt_pieces(seq)], specials)
    pairs: set[tuple[int, int]] = set()
    src_at = tgt_at = 0  # the segment's first piece in the line
    for seq, tgt, r in zip(ids, tgt_ids, replayed):
        seg_src = src_words[src_at : src_at + len(seq)]
        pairs.update(word_alignment(r.attention, seg_src, tgt_words[tgt_at : tgt_at + len(tgt)]))
        src_at, tgt_at = src_at + len(seq), tgt_at + len(tgt)
    return sorted(pairs)


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


def render_lines(translator, lines: list[str], fields: OutputFields) -> list[str]:
    """Each line's output as `fields` asks: the translation (tags put back), then its
    alignment, score and token probabilities, ` ||| `-separated."""
    annotation = Annotation(
        alignments=fields.alignments or fields.tags is not None,
        token_probs=fields.token_probs,
        layer=fields.layer,
    )
    if fields.tags is None:
        found = annotate(translator, lines, annotation)
    else:
        from seq2seq.decode.markup import translate_tagged  # imported late: only --tags needs it

        found = translate_tagged(translator, lines, annotation, fields.tags)
    return [
        render(
            a, alignments=fields.alignments, scores=fields.scores, token_probs=fields.token_probs
        )
        for a in found
    ]
