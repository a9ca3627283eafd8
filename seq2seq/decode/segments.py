"""What is decoded of input lines: each line, or each of its sentences, with the target terms
it must hold (given per line, or a glossary's hits in it), as one record a segment."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from seq2seq.config import DecodeConfig
from seq2seq.data.term_annotation import annotate, keeps_markers
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.glossary import MAX_CONSTRAINTS, Glossary, check_terms, term_ids
from seq2seq.decode.sentences import split_sentences
from seq2seq.decode.term_place import Hit

log = logging.getLogger(__name__)

Terms = tuple[tuple[int, ...], ...]  # target terms as token ids


@dataclass(frozen=True)
class Source:
    """One input line ready to decode: the token ids of each of its sentences (none for a
    blank line), each ending with EOS, and the target terms (token ids) each must hold."""

    segments: tuple[tuple[int, ...], ...]
    constraints: tuple[Terms, ...] = ()  # per segment; () for none
    first: int | None = None  # the target's forced first token (a many-language model's tag)
    # Markup taken out of the line (serve's "format"): put back around the aligned words.
    marked: Any = field(default=None, compare=False)
    line: int = field(default=0, compare=False)  # its 0-based line in the job's input, for messages
    # Term mode place: per segment, its source text and the glossary hits in it.
    places: tuple[tuple[str, tuple[Hit, ...]], ...] = field(default=(), compare=False)

    @property
    def tokens(self) -> int:
        """Source tokens, EOS included."""
        return sum(len(seq) for seq in self.segments)


@dataclass(frozen=True)
class Segment:
    """One encoded sentence (or whole line) of a prepared line, as the search takes it."""

    ids: list[int]
    owner: int  # the index of its line among the lines decoded together
    terms: Terms = ()
    first: int | None = None  # its forced first token, if any
    line: int = 0  # its line's 0-based number in the job's input (messages, sampling streams)
    source: str = ""  # term mode place: the sentence as given
    hits: tuple[Hit, ...] = ()  # term mode place: the glossary terms found in it


def flatten(sources: list[Source]) -> list[Segment]:
    """The segments of prepared lines, in order."""
    out = []
    for i, source in enumerate(sources):
        n = len(source.segments)
        terms, places = source.constraints or [()] * n, source.places or [("", ())] * n
        for seq, ts, (text, hits) in zip(source.segments, terms, places):
            out.append(Segment(list(seq), i, ts, source.first, source.line, text, hits))
    return out


def sources_of(
    lines: int,
    owner: list[int],
    encoded: list[list[int]],
    terms: list[Terms],
    *,
    first: int | None,
    first_line: int,
    places: list | None = None,
) -> list[Source]:
    """`lines` prepared lines from their segments' ids and target terms (`owner`: the line of
    each; `first`: the forced first token; `first_line`: the first line's number; `places`:
    each segment's text and glossary hits, for term mode place)."""
    pieces: list[list[tuple[int, ...]]] = [[] for _ in range(lines)]
    wanted: list[list[Terms]] = [[] for _ in range(lines)]
    where: list[list] = [[] for _ in range(lines)]
    for i, seq, ids, place in zip(owner, encoded, terms, places or [None] * len(owner)):
        pieces[i].append(tuple(seq))
        wanted[i].append(ids)
        where[i].append(place or ("", ()))
    return [
        Source(
            tuple(p),
            tuple(w) if any(w) else (),
            first,
            line=first_line + i,
            places=tuple(h) if any(hs for _, hs in h) else (),
        )
        for i, (p, w, h) in enumerate(zip(pieces, wanted, where))
    ]


class LineTerms:
    """Splits lines into segments and finds the target terms of each, warning once per term a
    glossary's model cannot write and once about a term mode the tokenizer cannot carry."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.warned: set[str] = set()  # glossary terms named in a warning already
        self.mode_warned = False

    @cached_property
    def markers(self) -> bool:
        """Whether the tokenizer keeps the term markers (<t>, </t>) whole."""
        return keeps_markers(self.tokenizer)

    def mode(self, options: DecodeConfig) -> str:
        """How a glossary's terms are applied: as `options.term_mode` says, but by constraints
        (warned about once) where the run's tokenizer lacks the term markers."""
        if options.term_mode in ("constrain", "place") or self.markers:
            return options.term_mode
        if not self.mode_warned:
            self.mode_warned = True
            log.warning(
                "term mode %s: the run's tokenizer has no term markers (<t>, </t>), so the model "
                "was not trained with data.augment.terms; the glossary is applied by constraints",
                options.term_mode,
            )
        return "constrain"

    def split(
        self,
        lines,
        constraints,
        glossary: Glossary | None,
        options: DecodeConfig,
        *,
        src_lang: str,
        first: int,
    ):
        """What is decoded (a line, or, as `options` say, its sentences), the line each belongs
        to, and its target terms (given per line, else the glossary's found in that segment;
        `first`: the 0-based number of the first line, for messages). With term mode annotate
        or both, each glossary hit is annotated inline in its segment; with annotate, it is no
        constraint; with place, each segment's text and hits come fourth."""
        split = options.split_sentences and options.nbest == 1
        mode = self.mode(options) if glossary is not None else "constrain"
        segments, owner, terms, places = [], [], [], []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            given = constraints[i] if constraints is not None else None
            whole = not split or bool(given)
            parts = [line] if whole else split_sentences(line.strip(), src_lang.split("_")[0])
            where = f"input line {first + i + 1}"
            for part in (p.strip() for p in parts):
                owner.append(i)
                if given is not None:
                    segments.append(part)
                    terms.append(check_terms(given, where))
                    places.append(None)
                    continue
                hits = glossary.find(part) if glossary else []
                plain = mode in ("constrain", "place")
                segments.append(part if plain else annotate(part, hits))
                wanted = [] if mode == "annotate" else [target for *_, target in hits]
                terms.append(check_terms(_at_most(wanted, where), where))
                kept = set(terms[-1])
                found = [h for h in hits if h[2] in kept]
                places.append((part, _hits(glossary, found)) if mode == "place" else None)
        return segments, owner, terms, places

    def ids(self, terms: list[str], line: int, *, glossary: bool) -> Terms:
        """A segment's target terms as token ids (`line`: its 0-based line number); a
        `glossary`'s terms the model cannot write are left out."""
        where = f"input line {line + 1}"
        found = self.writable(terms, where) if glossary else terms
        return term_ids(self.tokenizer.encode_tgt, found, where, self.tokenizer.ids.unk)

    def writable(self, terms: list[str], where: str) -> list[str]:
        """A glossary's terms less those with pieces the model cannot output (each warned
        about once)."""
        unk = self.tokenizer.ids.unk
        out = []
        for term, ids in zip(terms, self.tokenizer.encode_tgt(terms) if terms else []):
            if unk not in ids:
                out.append(term)
            elif term not in self.warned:
                self.warned.add(term)
                log.warning(
                    "%s: glossary term %r has pieces the model cannot output; skipped", where, term
                )
        return out


def _hits(glossary: Glossary, found: list[tuple[int, int, str]]) -> tuple[Hit, ...]:
    """Glossary hits as placement takes them, with the gender and number the glossary gives
    (`Glossary.info`, where the glossary has it)."""
    info = getattr(glossary, "info", None)
    out = []
    for start, end, target in found:
        entry = info(target) if callable(info) else None
        gender, number = getattr(entry, "gender", None), getattr(entry, "number", None)
        gender = gender if gender in ("m", "f") else None
        number = {"sg": "sg", "pl": "pl", "singular": "sg", "plural": "pl"}.get(number or "")
        out.append(Hit(start, end, target, gender, number))
    return tuple(out)


def _at_most(terms: list[str], where: str) -> list[str]:
    """A glossary's hits in one sentence, the MAX_CONSTRAINTS longest when there are more
    (each is a bank of the beam): the sentence is still translated, with a warning."""
    if len(terms) <= MAX_CONSTRAINTS:
        return terms
    keep = set(sorted(range(len(terms)), key=lambda j: -len(terms[j]))[:MAX_CONSTRAINTS])
    log.warning(
        "%s: %d glossary terms found; the %d longest are kept", where, len(terms), MAX_CONSTRAINTS
    )
    return [t for j, t in enumerate(terms) if j in keep]
