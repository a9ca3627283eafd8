"""Forced decoding: how probable a run finds a given translation of a given source.

Each target is fed to the decoder whole (teacher forcing) after its source is encoded: one
forward pass per batch, no search. A pair's score is the sum of its target tokens' natural-log
probabilities, EOS included, each over the whole vocabulary as search takes it
(`step.next_token_scores`), so a search's output scored here gets the search's own
`Hypothesis.log_prob` back. A many-language model's forced first token (the target language) is
part of the prefix but neither scored nor counted: search gives it probability 1. A
translator's lexical shortlist is not used: a score is the model's own, over its whole vocabulary.

Pairs are encoded as translation encodes a line: stripped, never split into sentences. A pair
longer than the model's positions is refused (one UserError naming its line) rather than cut as
translation cuts a source: the probability of a cut source is not the pair's. A filter that
scores what fits and counts the rest (distillation's backward run) uses `score_fitting`.

It is the building block of cross-entropy data filtering (fairseq-score, marian-scorer): score
a corpus in both directions, or under a clean and a noisy model, and keep the pairs whose
per-token scores agree and are high.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import pad, padding_mask
from seq2seq.data.corpus import decode_line
from seq2seq.data.tokenizer import SpecialIds
from seq2seq.decode.translator import Translator
from seq2seq.errors import UserError
from seq2seq.files import atomic_write
from seq2seq.model.transformer import Transformer

CHUNK_PAIRS = 4096  # pairs read, scored (in length-sorted batches) and written together
# Logits computed at once, in elements: the vocabulary projection goes a slice of positions at
# a time, so a 256k-entry vocabulary (NLLB) never holds a whole batch's logits.
LOGITS_BUDGET = 1 << 24


def score_pairs(
    translator: Translator,
    sources: list[str],
    targets: list[str],
    *,
    first_line: int = 0,
    options: DecodeConfig | None = None,
) -> list[tuple[float, int]]:
    """Per pair: (natural-log probability of the target given the source, target tokens scored,
    EOS included and a forced language token not), in input order, in the batches `options`
    (default: the translator's) make; a pair too long is one UserError naming its line (the
    first pair is line `first_line` + 1)."""
    src_ids, tgt_ids, forced = encode_pairs(translator, sources, targets, first_line=first_line)
    return _score_ids(translator, src_ids, tgt_ids, forced, options)


def score_fitting(
    translator: Translator, sources: list[str], targets: list[str]
) -> list[tuple[float, int] | None]:
    """As `score_pairs`, but a pair longer than the model's positions is left out: None."""
    src_ids, tgt_ids, forced = _encode(translator, sources, targets)
    most = translator.model.cfg.max_positions
    over = set(_too_long(src_ids, most, 0)) | set(_too_long(tgt_ids, most, 1))
    fits = [j for j in range(len(src_ids)) if j not in over]
    scores = _score_ids(translator, [src_ids[j] for j in fits], [tgt_ids[j] for j in fits], forced)
    out: list[tuple[float, int] | None] = [None] * len(src_ids)
    for j, scored in zip(fits, scores):
        out[j] = scored
    return out


def _score_ids(
    translator: Translator,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    forced: bool,
    options: DecodeConfig | None = None,
) -> list[tuple[float, int]]:
    out = [(0.0, 0)] * len(src_ids)
    with torch.inference_mode():
        for chunk, src in translator.batched(src_ids, options):
            rows = [tgt_ids[j] for j in chunk]
            totals = target_log_probs(translator.model, src, rows, translator.tokenizer.ids, forced)
            for j, total in zip(chunk, totals):
                out[j] = (total, len(tgt_ids[j]) + 1 - forced)
    return out


def encode_pairs(
    translator: Translator, sources: list[str], targets: list[str], *, first_line: int = 0
) -> tuple[list[list[int]], list[list[int]], bool]:
    """Source ids (with EOS), target ids (without; led by the forced language token, if any) and
    whether a token is forced first, between the translator's languages; a pair longer than the
    model's positions is one UserError naming its line (the first pair's is `first_line` + 1)."""
    src_ids, tgt_ids, forced = _encode(translator, sources, targets)
    most = translator.model.cfg.max_positions
    _check_length(src_ids, most, "source", 0, first_line)
    # The decoder's start token takes a position.
    _check_length(tgt_ids, most, "target", 1, first_line)
    return src_ids, tgt_ids, forced


def _encode(
    translator: Translator, sources: list[str], targets: list[str]
) -> tuple[list[list[int]], list[list[int]], bool]:
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
    src_lang, tgt_lang = translator.languages(None, None)
    tokenizer = translator.tokenizer
    src_ids = tokenizer.encode_src([s.strip() for s in sources], src_lang, tgt_lang)
    tgt_ids = tokenizer.encode_tgt([t.strip() for t in targets], tgt_lang)
    # The tokenizer leads each target with the forced token when (and only when) one is forced.
    forced = tokenizer.first_target_token(tgt_lang) is not None
    return src_ids, tgt_ids, forced


def _too_long(ids: list[list[int]], most: int, extra: int) -> list[int]:
    return [i for i, seq in enumerate(ids) if len(seq) + extra > most]


def _check_length(ids: list[list[int]], most: int, side: str, extra: int, first: int) -> None:
    over = _too_long(ids, most, extra)
    if not over:
        return
    i = over[0]
    more = f" (and {len(over) - 1} more)" if len(over) > 1 else ""
    raise UserError(
        f"line {first + i + 1}{more}: the {side} has {len(ids[i]) + extra} tokens, more than "
        f"the model's {most} positions; leave such pairs out to score the rest"
    )


def target_log_probs(
    model: Transformer,
    src: torch.Tensor,
    targets: list[list[int]],
    special: SpecialIds,
    skip_first: bool = False,
) -> list[float]:
    """Per padded source row of `src` [B, S]: the summed log-probability of its target (ids
    without EOS; EOS is appended and scored, the first token is not with `skip_first`),
    teacher-forced in one pass."""
    device = src.device
    src_mask = padding_mask(src, special.pad)
    tgt_in = pad(targets, prefix=special.start, pad_id=special.pad).to(device)
    tgt_out = pad(targets, suffix=special.eos, pad_id=special.pad)
    lengths = torch.tensor([len(t) + 1 for t in targets])
    scored = torch.arange(tgt_out.size(1)) < lengths.unsqueeze(1)
    if skip_first:
        scored[:, 0] = False
    memory = model.encode(src, src_mask)
    # The causal mask alone is exact at every real position: only padding follows them.
    states = model.decoder_states(tgt_in, memory, src_mask, None)[scored.to(device)]
    wanted = tgt_out[scored].to(device)
    step = max(1, LOGITS_BUDGET // model.output.out_features)
    token_lp = torch.cat(
        [_token_log_probs(model, h, w) for h, w in zip(states.split(step), wanted.split(step))]
    )
    rows = scored.nonzero()[:, 0]
    totals = torch.zeros(len(targets), dtype=torch.float64)
    return totals.index_add_(0, rows, token_lp.cpu().double()).tolist()


def _token_log_probs(model: Transformer, states: torch.Tensor, wanted: torch.Tensor):
    # As search scores a token: logit − logsumexp over every logit, in float32.
    logits = model.logits(states).float()
    return logits.gather(1, wanted.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=-1)


def score_line(total: float, count: int) -> str:
    """`total<TAB>per token`, natural log, 4 decimals."""
    return f"{total:.4f}\t{total / count:.4f}"


def score_files(
    translator: Translator,
    src: Path,
    tgt: Path,
    output: Path | None,
    *,
    chunk_pairs: int = CHUNK_PAIRS,
) -> int:
    """Score line-aligned source and target files into `output` (a file, replaced only on
    success; None: stdout), one `score_line` per pair, `chunk_pairs` pairs read at a time;
    returns the pairs scored."""
    counts = [_count_lines(src), _count_lines(tgt)]
    if counts[0] != counts[1]:
        raise UserError(
            f"source and target differ in length: {src} has {counts[0]} lines, "
            f"{tgt} has {counts[1]}"
        )
    if output is None:
        _score_into(translator, (src, tgt), sys.stdout, chunk_pairs)
    else:

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as out:
                _score_into(translator, (src, tgt), out, chunk_pairs)

        atomic_write(output, write)
    return counts[0]


def _score_into(translator: Translator, files: tuple[Path, Path], out: TextIO, size: int) -> None:
    done = 0  # pairs before this chunk: a too-long pair is named by its line in the files
    for sources, targets in _read_pairs(*files, size):
        scores = score_pairs(translator, sources, targets, first_line=done)
        out.writelines(score_line(*s) + "\n" for s in scores)
        out.flush()
        done += len(sources)


def _read_pairs(src: Path, tgt: Path, size: int) -> Iterator[tuple[list[str], list[str]]]:
    """(sources, targets) of up to `size` pairs at a time; invalid UTF-8 names file and line."""
    with ExitStack() as stack:
        files = [stack.enter_context(_open(p)) for p in (src, tgt)]
        chunk: tuple[list[str], list[str]] = ([], [])
        for n, raws in enumerate(zip(*files), 1):
            for side, raw, path in zip(chunk, raws, (src, tgt)):
                side.append(decode_line(raw, str(path), n))
            if len(chunk[0]) == size:
                yield chunk
                chunk = ([], [])
        if chunk[0]:
            yield chunk


def _count_lines(path: Path) -> int:
    with _open(path) as f:
        return sum(1 for _ in f)


def _open(path: Path):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
