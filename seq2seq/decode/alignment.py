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

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seq2seq.data.batching import pad, padding_mask
from seq2seq.data.tokenizer import SpecialIds
from seq2seq.model.cross_attention import explicit_cross_attention
from seq2seq.model.transformer import Transformer

# None: every decoder layer's attention, averaged. Chosen on /work/bench/enfr12 by
# scripts/bench_alignment.py (benchmarks/RESULTS-align.md): it agreed best with eflomal.
DEFAULT_LAYER = None


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
    scored_from: int = 0,
) -> list[Replayed]:
    """Teacher-force each target (ids with EOS) on its padded source row: the cross-attention of
    the decoder `layers` (negative: from the top), averaged over their heads (or only `head`'s)
    and them (none: no attention), and, with `log_probs`, each target id's log-probability.
    `memory`: the batch's encoder output, if the search kept it; `scored_from`: the first
    position whose log-probability is wanted (targets that share their first tokens need no
    output layer there: it is the costly one)."""
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
        # The top layer replayed feeds nothing without log-probabilities: its FFN is skipped.
        x, captured = _layer_with_attention(block, x, memory, src_mask, ffn=log_probs or i < last)
        picked = captured.float().mean(dim=1) if head is None else captured[:, head].float()
        heads = picked / len(chosen)  # [B, T, S]
        weights = heads if weights is None else weights + heads
    weights = None if weights is None else weights.cpu()
    token_lp = None
    if log_probs:
        logits = model.logits(model.decoder_norm(x[:, scored_from:])).float()
        target = pad(tgt, pad_id=special.pad).to(src.device)[:, scored_from:]
        token_lp = (logits.log_softmax(-1).gather(2, target.unsqueeze(2)).squeeze(2)).cpu()
    src_lens = src_mask.sum(1).tolist()
    return [
        Replayed(
            None if weights is None else weights[b, : len(t), : src_lens[b]],
            None if token_lp is None else token_lp[b, : max(0, len(t) - scored_from)].tolist(),
        )
        for b, t in enumerate(tgt)
    ]


def _layer_with_attention(
    block, x, memory, src_mask, ffn: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's output (as its forward, causal; without `ffn`, before its feed-forward
    block) and its cross-attention [B, H, T, S]."""
    x = block.self_block(x, lambda h: block.self_attn(h, None, causal=True))
    captured = []

    def cross(h: torch.Tensor) -> torch.Tensor:
        y, w = explicit_cross_attention(block.cross_attn, h, memory, src_mask)
        captured.append(w)
        return y

    x = block.cross_block(x, cross)
    return (block.ffn_block(x, block.ffn) if ffn else x), captured[0]


@contextmanager
def encoder_outputs_kept(model: Transformer) -> Iterator[dict[tuple, torch.Tensor]]:
    """While it lasts, each batch the model encodes keeps its encoder output, by source ids, so
    that replaying the batch after search does not encode it again (a model used by one thread
    at a time, as the translator's is); nested, each keeper sees the batches of its time."""
    kept: dict[tuple, torch.Tensor] = {}
    outer = model.__dict__.get("encode")  # an enclosing keeper's: it keeps its batches too
    encode = model.encode

    def keeping(src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        memory = encode(src, src_mask)
        kept[batch_key(src)] = memory
        return memory

    model.encode = keeping  # an instance attribute, shadowing the method until deleted
    try:
        yield kept
    finally:
        if outer is None:
            del model.encode
        else:
            model.encode = outer


def batch_key(src: torch.Tensor) -> tuple:
    return (tuple(src.shape), src.cpu().numpy().tobytes())
