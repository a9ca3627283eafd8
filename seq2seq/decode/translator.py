"""Text in, text out: a trained model with its tokenizer and decoding settings."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import DecodeConfig, load_run_config
from seq2seq.data.batching import pad
from seq2seq.data.multilingual import check_languages, encode_sources, forced_first_token
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.glossary import Glossary, check_terms, term_ids
from seq2seq.decode.hypothesis import Hypothesis, SearchError, length_penalty
from seq2seq.decode.search import decode
from seq2seq.decode.sentences import split_sentences
from seq2seq.errors import UserError
from seq2seq.model.quantize import int8_device, quantize_int8
from seq2seq.model.transformer import Transformer
from seq2seq.run.rundir import load_run
from seq2seq.runtime import autocast_dtype, resolve_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """One input line ready to decode: the token ids of each of its sentences (none for a
    blank line), each ending with EOS, and the target terms (token ids) each must hold."""

    segments: tuple[tuple[int, ...], ...]
    constraints: tuple[tuple[tuple[int, ...], ...], ...] = ()  # per segment; () for none
    first: int | None = None  # the target's forced first token (a many-language model's tag)
    # Markup taken out of the line (serve's "format"): put back around the aligned words.
    marked: Any = field(default=None, compare=False)

    @property
    def tokens(self) -> int:
        """Source tokens, EOS included."""
        return sum(len(seq) for seq in self.segments)


class Translator:
    """Translates lists of lines in length-sorted batches; one result per input, always.

    With `decode.split_sentences`, a line of several sentences is decoded sentence by sentence
    and its translations joined (their tokens concatenated, so the target SentencePiece model
    puts the space between them).
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device,
        *,
        amp_dtype: torch.dtype | None = None,
        src_lang: str = "en",
        tgt_lang: str = "",
    ):
        self.model, self.tokenizer, self.decode = model, tokenizer, decode
        self.device, self.amp_dtype = device, amp_dtype
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.max_src_len = model.cfg.max_positions
        self.glossary: Glossary | None = None  # terms every line is checked for, if any
        # (decoder layer, head) trained on word alignments (train.alignment), if one was.
        self.guided_head: tuple[int, int] | None = None

    def set_languages(self, src_lang: str | None = None, tgt_lang: str | None = None) -> None:
        """Translate from and into these languages from now on (checked: one clear error)."""
        src, tgt = self.languages(src_lang, tgt_lang)
        self.src_lang, self.tgt_lang = src, tgt

    def languages(self, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
        """The (source, target) languages a request means, the run's defaults filling in;
        a language the model lacks (or a missing one it needs) is one UserError."""
        given, defaults = (src_lang, tgt_lang), (self.src_lang, self.tgt_lang)
        return check_languages(self.tokenizer, given, defaults)

    def translate(
        self,
        lines: list[str],
        constraints: list[list[str]] | None = None,
        *,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> list[str]:
        """The best translation of each line; empty (or blank) lines give empty outputs."""
        sources = self.prepare(lines, constraints=constraints, src_lang=src_lang, tgt_lang=tgt_lang)
        return [best[0][0] for best in self.translate_sources(sources)]

    def translate_nbest(
        self, lines: list[str], constraints: list[list[str]] | None = None
    ) -> list[list[tuple[str, float]]]:
        """The `decode.nbest` best (text, score) pairs of each line, best first; each holds the
        line's target terms (`constraints`, else those of `glossary`) once.

        An n-best list (nbest > 1) is of whole lines: such lines are never split.
        """
        return self.translate_sources(self.prepare(lines, constraints=constraints))

    def prepare(
        self,
        lines: list[str],
        options: DecodeConfig | None = None,
        *,
        glossary: Glossary | None = None,
        constraints: list[list[str]] | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> list[Source]:
        """Each line split into sentences (as `options`, default `decode`, say) and encoded,
        truncated to the model's positions; a blank line has no segments. `src_lang` and
        `tgt_lang` (default: the translator's) matter to a many-language model.

        Target terms each sentence must hold come from `glossary` (those whose source term the
        sentence holds: a term goes with its sentence) or are given per line (`constraints`;
        such a line is decoded whole, as nothing says which sentence a term belongs to)."""
        options = options or self.decode
        glossary = glossary if glossary is not None else self.glossary
        src_lang, tgt_lang = self.languages(src_lang, tgt_lang)
        first = forced_first_token(self.tokenizer, tgt_lang)
        split = options.split_sentences and options.nbest == 1
        if constraints is not None and len(constraints) != len(lines):
            raise UserError(f"{len(constraints)} lines of constraints for {len(lines)} input lines")
        segments, owner, terms = [], [], []  # what is decoded, its line, its target terms
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            given = constraints[i] if constraints is not None else None
            whole = not split or bool(given)
            parts = [line] if whole else split_sentences(line.strip(), src_lang.split("_")[0])
            segments += [p.strip() for p in parts]
            owner += [i] * len(parts)
            for p in parts:
                found = given if given is not None else glossary.terms_in(p) if glossary else []
                terms.append(check_terms(found, f"input line {i + 1}"))
        if any(terms) and options.beam_size < 2:
            raise UserError("terminology constraints need a beam size of at least 2 (--beam 4)")
        pieces: list[list[tuple[int, ...]]] = [[] for _ in lines]
        wanted: list[list[tuple[tuple[int, ...], ...]]] = [[] for _ in lines]
        for i, seq, found in zip(owner, self._encode(segments, owner, (src_lang, tgt_lang)), terms):
            pieces[i].append(tuple(seq))
            where = f"input line {i + 1}"
            wanted[i].append(
                term_ids(self.tokenizer.encode_tgt, found, where, self.tokenizer.ids.unk)
            )
        return [Source(tuple(p), tuple(w) if any(w) else (), first) for p, w in zip(pieces, wanted)]

    def translate_sources(
        self, sources: list[Source], wanted: Callable[[int], bool] | None = None
    ) -> list[list[tuple[str, float]]]:
        """`translate_nbest` of lines already prepared (split and encoded). `wanted(i)`, asked
        while decoding, says whether line i's result is still awaited; the lines it gives up
        on stop early and come back empty."""
        if any(source.marked is not None for source in sources):
            return _with_markup(self, sources)
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sources]
        ids, owner, terms = [], [], []  # what is decoded, its line, its target terms
        for i, source in enumerate(sources):
            ids += [list(seq) for seq in source.segments]
            owner += [i] * len(source.segments)
            terms += list(source.constraints) or [()] * len(source.segments)
        firsts = [sources[i].first for i in owner]
        found = self._search(ids, owner, terms, firsts, wanted)
        by_line: dict[int, list[list[Hypothesis]]] = {}
        for i, hyps in zip(owner, found):
            by_line.setdefault(i, []).append(hyps)
        alpha, norm = self.decode.length_penalty, self.decode.length_norm
        for i, pieces in by_line.items():
            if wanted is not None and not wanted(i):
                continue  # stopped part-way: whatever the search holds is not a translation
            hyps = pieces[0] if len(pieces) == 1 else [_joined([p[0] for p in pieces], alpha, norm)]
            texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
            # Never a newline inside an output line.
            out[i] = [(" ".join(t.split()), h.score) for t, h in zip(texts, hyps)]
        return out

    def _encode(
        self, segments: list[str], owner: list[int], langs: tuple[str, str]
    ) -> list[list[int]]:
        """Source ids of each segment, cut to the model's maximum (`owner`: input line
        indices, for the warning; `langs`: source and target language)."""
        ids = encode_sources(self.tokenizer, segments, *langs) if segments else []
        for j, seq in enumerate(ids):
            if len(seq) > self.max_src_len:
                log.warning(
                    "input line %d has %d tokens; truncated to the model's maximum of %d",
                    owner[j] + 1,
                    len(seq),
                    self.max_src_len,
                )
                ids[j] = seq[: self.max_src_len - 1] + [self.tokenizer.ids.eos]
        return ids

    def search(
        self,
        ids: list[list[int]],
        owner: list[int],
        terms: list | None = None,
        firsts: list[int | None] | None = None,
    ) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each encoded segment (`owner`: its input line index;
        `terms`, `firsts`: its target terms and forced first token, as a Source holds them)."""
        return self._search(ids, owner, terms, firsts)

    def batches(self, ids: list[list[int]]) -> list[list[int]]:
        """Indices of `ids` in the length-sorted batches they are decoded in."""
        return decode_batches(ids, self.decode.batch_size, self.decode.max_tokens)

    def _search(
        self,
        ids: list[list[int]],
        owner: list[int],
        terms: list | None = None,
        firsts: list[int | None] | None = None,
        wanted: Callable[[int], bool] | None = None,
    ) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each segment (`owner`: input line indices, for messages;
        `terms`: the target terms, token ids, each segment must hold; `firsts`: each one's
        forced first target token, or None; `wanted`: see translate_sources)."""
        terms = terms or [()] * len(ids)
        firsts = firsts or [None] * len(ids)
        found: list[list[Hypothesis]] = [[] for _ in ids]
        was_training = self.model.training
        self.model.eval()
        try:
            for chunk in self.batches(ids):
                dropped = None
                if wanted is not None:
                    dropped = partial(_unwanted, wanted, [owner[j] for j in chunk])
                    if all(dropped()):
                        for j in chunk:
                            found[j] = [Hypothesis([], 0.0, 0.0)]
                        continue
                try:
                    results = self._decode_batch(
                        [ids[j] for j in chunk],
                        [terms[j] for j in chunk],
                        [firsts[j] for j in chunk],
                        dropped,
                    )
                except SearchError as e:
                    bad = sorted({owner[chunk[i]] + 1 for i in e.sentences})
                    raise UserError(
                        f"the model's scores are not finite (NaN or infinite) for input line(s) "
                        f"{', '.join(map(str, bad))}: no translation; is the checkpoint damaged?"
                    ) from None
                for j, hyps in zip(chunk, results):
                    found[j] = hyps
                    _warn_unmet(hyps[0], owner[j])
        finally:
            self.model.train(was_training)
        return found

    def _decode_batch(
        self, ids: list[list[int]], terms: list, firsts: list[int | None], dropped=None
    ) -> list[list[Hypothesis]]:
        special = self.tokenizer.ids
        src = pad(ids, pad_id=special.pad).to(self.device)
        # Rows of one batch may start different target languages (a server's requests).
        first = None if firsts[0] is None else torch.tensor(firsts, device=self.device)
        amp = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else nullcontext()
        )
        constrained = {"constraints": terms, "glue": self._glue()} if any(terms) else {}
        with amp:
            return decode(
                self.model,
                src,
                self.decode,
                special=special,
                dropped=dropped,
                first=first,
                **constrained,
            )

    def _glue(self) -> torch.Tensor:
        """Target pieces that continue the word before them (no "▁", a letter or digit first):
        constrained search keeps them from right after a term. Computed once."""
        if getattr(self, "_glue_mask", None) is None:
            pieces = self.tokenizer.tgt_vocabulary()
            mask = [not p.startswith("▁") and p[:1].isalnum() for p in pieces]
            self._glue_mask = torch.tensor(mask, dtype=torch.bool, device=self.device)
        return self._glue_mask


def _warn_unmet(best: Hypothesis, line: int) -> None:
    unmet = getattr(best, "unmet", ())
    if unmet:
        log.warning(
            "input line %d: %d target term(s) did not fit before the output length cap",
            line + 1,
            len(unmet),
        )


def _unwanted(wanted: Callable[[int], bool], lines: list[int]) -> list[bool]:
    return [not wanted(i) for i in lines]


def decode_batches(
    ids: list[list[int]], batch_size: int, max_tokens: int | None
) -> list[list[int]]:
    """Indices in length order, cut by `batch_size` sentences and `max_tokens` tokens."""
    order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
    batches, current, longest = [], [], 0
    for j in order:
        grown = max(longest, len(ids[j]))
        full = len(current) >= batch_size or (
            max_tokens is not None and (len(current) + 1) * grown > max_tokens
        )
        if current and full:
            batches.append(current)
            current, grown = [], len(ids[j])
        current.append(j)
        longest = grown
    if current:
        batches.append(current)
    return batches


def _with_markup(translator: Translator, sources: list[Source]) -> list[list[tuple[str, float]]]:
    """Best translations with each source's markup put back around the words aligned to the
    words it wrapped (a batch holding markup is aligned whole)."""
    from seq2seq.decode.alignment import Annotation, annotate_sources
    from seq2seq.decode.markup import reinsert

    found = annotate_sources(translator, sources, Annotation(alignments=True))
    return [
        [(a.text if s.marked is None else reinsert(s.marked, a.text, a.alignment or []), a.score)]
        for s, a in zip(sources, found)
    ]


def _joined(hyps: list[Hypothesis], alpha: float, norm: str) -> Hypothesis:
    """One hypothesis of a line from those of its sentences: tokens in order, log-probabilities
    summed, scored with the length penalty of the whole (each sentence's EOS counted)."""
    tokens = [t for h in hyps for t in h.tokens]
    log_prob = sum(h.log_prob for h in hyps)
    length = sum(len(h.tokens) + 1 for h in hyps)
    return Hypothesis(tokens, log_prob / length_penalty(length, alpha, norm), log_prob)


def load_translator(
    run_dir: Path,
    checkpoint: Path | None = None,
    device: str = "auto",
    *,
    decode: DecodeConfig | None = None,
) -> tuple[Translator, Path]:
    """A Translator for a run directory's best (else latest) or a given checkpoint, decoding
    with `decode` (default: the run's own settings; `decode.quantize: int8` loads it int8)."""
    decode = decode or load_run_config(run_dir).decode
    int8 = decode.quantize == "int8"
    dev = resolve_device(int8_device(device) if int8 else device)
    run = load_run(run_dir, checkpoint, dev)
    if int8:  # once, at load: decoding then runs the int8 model like any other
        quantize_int8(run.model)
    amp = autocast_dtype(dev, "auto")
    data = run.config.data
    translator = Translator(
        run.model,
        run.tokenizer,
        decode,
        dev,
        amp_dtype=amp,
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
    )
    guided = run.config.train.alignment
    if guided is not None:
        translator.guided_head = (guided.layer, guided.head)
    return translator, run.checkpoint
