"""Dual conditional cross-entropy filtering (Junczys-Dowmunt 2018, the best WMT18 filter): a
pair is scored by a forward (source → target) and a backward (target → source) run, and goes
when the two per-token cross-entropies are high or disagree. Rule filters cannot see a
misaligned pair of plausible length in the right languages; these scores can."""

from __future__ import annotations

import math
from collections.abc import Callable

from seq2seq.decode.score import score_pairs
from seq2seq.decode.translator import Translator


def dual_xent(forward: Translator, backward: Translator, src: list[str], tgt: list[str]):
    """Per pair |H_fwd − H_bwd| + (H_fwd + H_bwd) / 2, per-token natural-log cross-entropies
    (lower is better); a pair too long for either model's positions scores infinity."""
    fits = [i for i in range(len(src)) if _fits(forward, src[i], tgt[i])]
    fits = [i for i in fits if _fits(backward, tgt[i], src[i])]
    out = [math.inf] * len(src)
    if not fits:
        return out
    fwd = score_pairs(forward, [src[i] for i in fits], [tgt[i] for i in fits])
    bwd = score_pairs(backward, [tgt[i] for i in fits], [src[i] for i in fits])
    for i, (ft, fn), (bt, bn) in zip(fits, fwd, bwd):
        h_fwd, h_bwd = -ft / max(1, fn), -bt / max(1, bn)
        out[i] = abs(h_fwd - h_bwd) + (h_fwd + h_bwd) / 2
    return out


def _fits(translator: Translator, src: str, tgt: str) -> bool:
    src_lang, tgt_lang = translator.languages(None, None)
    tok, most = translator.tokenizer, translator.model.cfg.max_positions
    (s,) = tok.encode_src([src], src_lang, tgt_lang)
    (t,) = tok.encode_tgt([tgt], tgt_lang)
    return len(s) <= most and len(t) + 1 <= most  # the decoder's start takes a position


def dual_xent_filter(
    forward: Translator, backward: Translator, most: float
) -> Callable[[list[str], list[str]], list[bool]]:
    """A keep(sources, targets) -> [passes] for the cleaner: a dual score of at most `most`."""

    def keep(src: list[str], tgt: list[str]) -> list[bool]:
        return [score <= most for score in dual_xent(forward, backward, src, tgt)]

    return keep
