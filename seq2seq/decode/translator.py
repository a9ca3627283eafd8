"""Text in, text out: a trained model with its tokenizer and decoding settings."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from seq2seq.config import DecodeConfig, load_run_config
from seq2seq.data.batching import pad
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.alignment import encoder_outputs_kept
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.hypothesis import Hypothesis, SearchError, length_penalty
from seq2seq.decode.placing import TermPlacer
from seq2seq.decode.sampling import line_streams
from seq2seq.decode.search import decode
from seq2seq.decode.segments import LineTerms, Segment, Source, flatten, sources_of
from seq2seq.decode.shortlist import Shortlist, load_shortlist
from seq2seq.decode.spelling import TermSpelling
from seq2seq.decode.term_lexicon import TermLexicon, lexicon_of
from seq2seq.errors import UserError
from seq2seq.model.transformer import Transformer
from seq2seq.run.rundir import load_for_decoding
from seq2seq.runtime import autocast_dtype, keep_freed_memory

log = logging.getLogger(__name__)

PLACE_FALLBACK_BEAM = 10  # the constrained beam a term with no span found falls back to


class Translator:
    """Translates lists of lines in length-sorted batches; one result per input, always.
    With `split_sentences`, a line's sentences are decoded apart and their tokens joined.
    Built ready by `load_translator`; nothing is set on it later: a call's own decoding
    options (a request's) are an argument, `options`, the run's by default."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        options: DecodeConfig,
        device: torch.device,
        *,
        amp_dtype: torch.dtype | None = None,
        src_lang: str = "en",
        tgt_lang: str = "",
        glossary: Glossary | None = None,
        guided_head: tuple[int, int] | None = None,
        shortlist: Shortlist | None = None,
        lexicon: TermLexicon | None = None,
    ):
        self.model, self.tokenizer, self._options = model, tokenizer, options
        self.device, self.amp_dtype = device, amp_dtype
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.max_src_len = model.cfg.max_positions
        self.glossary = glossary  # terms every line is checked for, if any
        # (decoder layer, head) trained on word alignments (train.alignment), if one was.
        self.guided_head, self.shortlist = guided_head, shortlist
        # What it works out of the tokenizer once, and the terms it warned about.
        self.spelling, self.terms = TermSpelling(tokenizer, device), LineTerms(tokenizer)
        # Term mode place: segments whose plain output held its terms, had them placed, or
        # fell back to the constrained beam (the fallback's share), counted over calls.
        self.term_stats: Counter = Counter()
        self.placer = TermPlacer(self, lexicon)

    @property
    def options(self) -> DecodeConfig:
        """The decoding options a call uses unless it is given its own."""
        return self._options

    def languages(self, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
        """The (source, target) languages a request means, the run's defaults filling in;
        a language the model lacks (or a missing one it needs) is one UserError."""
        given, defaults = (src_lang, tgt_lang), (self.src_lang, self.tgt_lang)
        return self.tokenizer.check_languages(given, defaults)

    def translate(
        self,
        lines: list[str],
        constraints: list[list[str]] | None = None,
        *,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        first_line: int = 0,
        options: DecodeConfig | None = None,
    ) -> list[str]:
        """The best translation of each line; empty (or blank) lines give empty outputs
        (`first_line`: the 0-based number of the first, for messages)."""
        languages = {"src_lang": src_lang, "tgt_lang": tgt_lang}
        found = self.translate_nbest(lines, constraints, first_line, options, **languages)
        return [best[0][0] for best in found]

    def translate_nbest(
        self,
        lines: list[str],
        constraints: list[list[str]] | None = None,
        first_line: int = 0,
        options: DecodeConfig | None = None,
        **languages: str | None,
    ) -> list[list[tuple[str, float]]]:
        """The `options.nbest` best (text, score) pairs of each line, best first; each holds the
        line's target terms (`constraints`, else those of `glossary`). An n-best list
        (nbest > 1) is of whole lines: such lines are never split."""
        sources = self.prepare(
            lines, options, constraints=constraints, first_line=first_line, **languages
        )
        return self.translate_sources(sources, options=options)

    def prepare(
        self,
        lines: list[str],
        options: DecodeConfig | None = None,
        *,
        glossary: Glossary | None = None,
        constraints: list[list[str]] | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        first_line: int = 0,
        truncate: bool = True,
    ) -> list[Source]:
        """Each line split into sentences (as `options`, default the translator's, say) and encoded,
        truncated to the model's positions; a blank line has no segments. `src_lang` and
        `tgt_lang` (default: the translator's) matter to a many-language model.

        Target terms each sentence must hold come from `glossary` (those whose source term the
        sentence holds: a term goes with its sentence) or are given per line (`constraints`;
        such a line is decoded whole, as nothing says which sentence a term belongs to)."""
        options = options or self.options
        glossary = glossary if glossary is not None else self.glossary
        src_lang, tgt_lang = self.languages(src_lang, tgt_lang)
        if constraints is not None and len(constraints) != len(lines):
            raise UserError(f"{len(constraints)} lines of constraints for {len(lines)} input lines")
        at = {"src_lang": src_lang, "first": first_line}
        segments, owner, terms, places = self.terms.split(
            lines, constraints, glossary, options, **at
        )
        if any(terms) and options.beam_size < 2:
            raise UserError("terminology constraints need a beam size of at least 2 (--beam 4)")
        numbers = [first_line + i for i in owner]
        most = self.max_src_len if truncate else None  # serve refuses (413) instead of cutting
        encoded = _encode(self.tokenizer, segments, numbers, (src_lang, tgt_lang), most)
        # A glossary's term the model cannot write is skipped; a given one is an error.
        ids = [self.terms.ids(t, n, glossary=constraints is None) for t, n in zip(terms, numbers)]
        first = self.tokenizer.first_target_token(tgt_lang)
        kept = [p if p is None else (p[0], _writable(self.terms, p[1])) for p in places]
        at = {"first": first, "first_line": first_line}
        return sources_of(len(lines), owner, encoded, ids, places=kept, **at)

    def translate_sources(
        self,
        sources: list[Source],
        wanted: Callable[[int], bool] | None = None,
        options: DecodeConfig | None = None,
    ) -> list[list[tuple[str, float]]]:
        """`translate_nbest` of lines already prepared (split and encoded), with `options`
        (default: the translator's). `wanted(i)`, asked while decoding, says whether line i's
        result is still awaited; the lines it gives up on stop early and come back empty."""
        options = options or self.options
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sources]
        segments = flatten(sources)
        by_line: dict[int, list[list[Hypothesis]]] = {}
        for segment, hyps in zip(segments, self.search(segments, wanted, options)):
            by_line.setdefault(segment.owner, []).append(hyps)
        for i, pieces in by_line.items():
            if wanted is not None and not wanted(i):
                continue  # stopped part-way: whatever the search holds is not a translation
            hyps = pieces[0] if len(pieces) == 1 else [joined_hypothesis(pieces, options)]
            texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
            # Never a newline inside an output line.
            out[i] = [(" ".join(t.split()), h.score) for t, h in zip(texts, hyps)]
        return out

    def batches(self, ids: list[list[int]], options: DecodeConfig | None = None) -> list[list[int]]:
        """Indices of `ids` in the length-sorted batches they are decoded in."""
        options = options or self.options
        return length_batches(ids, options.batch_size, options.max_tokens)

    def batched(
        self, ids: list[list[int]], options: DecodeConfig | None = None
    ) -> Iterator[tuple[list[int], torch.Tensor]]:
        """The one batched engine: (indices, padded sources on the device) of each batch,
        the model in eval mode and under the run's autocast while the caller uses it."""
        was_training = self.model.training
        if was_training:  # train(False) walks every module: placing asks hundreds of times
            self.model.eval()
        amp = (
            torch.autocast(self.device.type, dtype=self.amp_dtype)
            if self.amp_dtype is not None
            else nullcontext()
        )
        try:
            for chunk in self.batches(ids, options):
                src = pad([ids[j] for j in chunk], pad_id=self.tokenizer.ids.pad)
                with amp:
                    yield chunk, src.to(self.device)
        finally:
            if was_training:
                self.model.train()

    def search(
        self,
        segments: list[Segment],
        wanted: Callable[[int], bool] | None = None,
        options: DecodeConfig | None = None,
    ) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each segment, with `options` (default: the translator's;
        `wanted`: see translate_sources)."""
        options = options or self.options
        if options.term_mode == "place" and any(s.terms for s in segments):
            return _placed(self, segments, wanted, options)
        streams = line_streams([s.line for s in segments])  # a sentence samples its own stream
        found: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in segments]
        for chunk, src in self.batched([s.ids for s in segments], options):
            batch = [segments[j] for j in chunk]
            dropped = None
            if wanted is not None:
                dropped = partial(_unwanted, wanted, [s.owner for s in batch])
                if all(dropped()):
                    continue
            results = _search_batch(self, src, batch, options, dropped, [streams[j] for j in chunk])
            for j, hyps in zip(chunk, results):
                found[j] = hyps
                _warn_unmet(hyps[0], segments[j].line)
        return found


def _writable(terms: LineTerms, hits: tuple) -> tuple:
    """A segment's hits less those whose term the model cannot write (left out of its terms,
    warned about there)."""
    ok = set(terms.writable([h.target for h in hits], "")) if hits else set()
    return tuple(h for h in hits if h.target in ok)


def _placed(translator: Translator, segments, wanted, options: DecodeConfig):
    """Term mode place: the plain beam's n-best, each segment lacking a term given it placed;
    a segment whose term has no span found, the constrained beam's, at a beam of at least
    PLACE_FALLBACK_BEAM (what dynamic beam allocation needs for its banks)."""
    plain = [replace(s, terms=()) for s in segments]
    with encoder_outputs_kept(translator.model) as kept:  # placing reads the sources again
        found = translator.search(plain, wanted, options)
    rest = translator.placer.place(segments, found, options, kept)
    if rest:
        beam = max(options.beam_size, PLACE_FALLBACK_BEAM)
        wider = options.model_copy(update={"beam_size": beam, "term_mode": "constrain"})
        for j, hyps in zip(rest, translator.search([segments[j] for j in rest], wanted, wider)):
            found[j] = hyps[: options.nbest]
    return found


def _encode(
    tokenizer: Tokenizer,
    segments: list[str],
    owner: list[int],
    langs: tuple[str, str],
    most: int | None,
) -> list[list[int]]:
    """Source ids of each segment, cut to `most` tokens if given (`owner`: 0-based input line
    numbers, for the warning; `langs`: source and target language)."""
    ids = tokenizer.encode_src(segments, *langs) if segments else []
    for j, seq in enumerate(ids):
        if most is not None and len(seq) > most:
            log.warning(
                "input line %d has %d tokens; truncated to the model's maximum of %d",
                owner[j] + 1,
                len(seq),
                most,
            )
            ids[j] = seq[: most - 1] + [tokenizer.ids.eos]
    return ids


def _search_batch(
    translator: Translator, src, batch: list[Segment], options: DecodeConfig, dropped, streams
):
    # Rows of one batch may start different target languages (a server's requests).
    firsts, terms = [s.first for s in batch], [s.terms for s in batch]
    first = None if firsts[0] is None else torch.tensor(firsts, device=translator.device)
    extra = {"special": translator.tokenizer.ids, "dropped": dropped, "first": first}
    if any(terms):
        spelling = translator.spelling
        spellings = spelling.spellings({t for ts in terms for t in ts}, src)
        extra |= {"constraints": terms, "glue": spelling.glue, "spellings": spellings}
    elif translator.shortlist is not None:  # terms: the whole vocabulary
        extra["rows"] = translator.shortlist.rows(src, first)
    try:
        return decode(translator.model, src, options, streams=streams, **extra)
    except SearchError as e:
        raise _not_finite(sorted({batch[i].line + 1 for i in e.sentences})) from None


def _not_finite(lines: list[int]) -> UserError:
    return UserError(
        f"the model's scores are not finite (NaN or infinite) for input line(s) "
        f"{', '.join(map(str, lines))}: no translation; is the checkpoint damaged?"
    )


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


def length_batches(
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


def joined_hypothesis(pieces: list[list[Hypothesis]], options: DecodeConfig) -> Hypothesis:
    """One hypothesis of a line from the best of each of its sentences: tokens in order,
    log-probabilities summed, scored with the length penalty of the whole (each EOS counted)."""
    hyps = [p[0] for p in pieces]
    alpha, norm = options.length_penalty, options.length_norm
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
    glossary: Glossary | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    shortlist: bool = False,
    packed: bool | None = None,
) -> tuple[Translator, Path]:
    """A ready Translator for a run directory's best (else latest) or a given checkpoint,
    decoding with `decode` (default: the run's own settings; its load-time part, `decode.load`,
    says how the weights load: int8, or float32 on oneDNN-packed weights on CPU), checking
    lines for `glossary`'s terms, between `src_lang` and `tgt_lang` (default: the run's;
    checked: one clear error), scoring only the run's lexical shortlist
    (RUN/shortlist.safetensors) when `shortlist`; `packed` overrides `decode.packed_weights`."""
    decode = decode or load_run_config(run_dir).decode
    load = (
        decode.load if packed is None else decode.load.model_copy(update={"packed_weights": packed})
    )
    # A shortlist scores a subset of the output rows: that layer keeps torch's GEMM.
    unpacked = frozenset({"output"} if shortlist else ())
    rows = decode.batch_size * decode.beam_size
    run, dev = load_for_decoding(run_dir, checkpoint, device, load, rows=rows, unpacked=unpacked)
    data, guided = run.config.data, run.config.train.alignment
    translator = Translator(
        run.model,
        run.tokenizer,
        decode,
        dev,
        amp_dtype=autocast_dtype(dev, "auto"),
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
        glossary=glossary,
        guided_head=None if guided is None else (guided.layer, guided.head),
        shortlist=load_shortlist(run_dir, run.tokenizer).to(dev) if shortlist else None,
        lexicon=lexicon_of(run_dir, *((data.train.src, data.train.tgt) if data.train else ())),
    )
    if src_lang or tgt_lang:  # a many-language model's direction
        translator.src_lang, translator.tgt_lang = translator.languages(src_lang, tgt_lang)
    if dev.type == "cpu":  # after loading, whose freed float32 weights went back to the system
        keep_freed_memory()
    return translator, run.checkpoint
