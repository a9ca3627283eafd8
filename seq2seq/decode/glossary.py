"""Terminology: a glossary of source term → target term pairs (read from TSV, CSV or TBX files
by `glossary_files`, each target term's gender and number kept), which source terms occur in a
sentence, and the per-sentence target-term constraints that constrained search must keep.

Case rule: a source term matches whole words of a sentence, the sentence and the term folded
alike (`term_index`: NFKC and casefold, so "Server", "SERVER" and "ｓｅｒｖｅｒ" all match
"server", and "STRASSE" matches "Straße"); in scripts written without spaces (Chinese,
Japanese, Thai…) it matches at any character. Where terms overlap, the longest one starting
first wins. The target term is forced exactly as written, case included.

Constraints may also be given directly, one JSON list of target terms per input line
(`--constraints`): `["ordinateur portable", "clé USB"]`, `[]` for none.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from seq2seq.decode.glossary_files import (
    MAX_TERM_CHARS,
    TermEntry,
    checked,
    entry_of,
    load_glossary_file,
)
from seq2seq.decode.term_index import TermIndex, term_key, text_units
from seq2seq.errors import UserError

MAX_GLOSSARY_PAIRS = 20_000  # each is a path in the term index, built when the glossary is read
MAX_CONSTRAINTS = 16  # per sentence: each is a bank of the beam and a column of its state
MAX_TERM_TOKENS = 32

# A word character on either side would make a match part of a longer word.
_WORD = r"\w"


@dataclass(frozen=True, eq=False)
class Glossary:
    """Source term → target term pairs, with the index that finds source terms; `base`: a
    glossary under this one (a server's), whose terms count too unless this one gives the
    same source term."""

    pairs: tuple[tuple[str, str], ...]
    targets: dict[tuple[str, ...], str]  # folded source term (its units) → target term
    index: TermIndex = field(repr=False)
    base: Glossary | None = None
    entries: dict[str, TermEntry] = field(default_factory=dict, repr=False)  # by target term

    def info(self, target: str) -> TermEntry | None:
        """The entry of a target term (its gender, number, case; this glossary's before its
        `base`'s), or None when no pair gives that target term."""
        layer: Glossary | None = self
        while layer is not None:
            if target in layer.entries:
                return layer.entries[target]
            layer = layer.base
        return None

    def terms_in(self, sentence: str) -> list[str]:
        """The target term of each source term occurrence in `sentence`, in order: a term
        whose source occurs twice is listed twice, and the search then places it twice
        ("cent vingt et un mille deux cent" keeps both "cent")."""
        return [target for _, _, target in self.find(sentence)]

    def find(self, sentence: str) -> list[tuple[int, int, str]]:
        """Each source term occurrence as (start, end, target term), spans of `sentence`,
        left to right; the longest where several start at one place."""
        symbols, starts, ends = text_units(sentence)
        if not symbols:
            return []
        best = [(0, "")] * len(symbols)  # (units, target) of the longest term at each unit
        layer: Glossary | None = self
        while layer is not None:  # the upper layer first: it wins a tie (the same term)
            for at, k in enumerate(layer.index.longest_at(symbols)):
                if k >= 0 and layer.index.lengths[k] > best[at][0]:
                    best[at] = (layer.index.lengths[k], layer.pairs[k][1])
            layer = layer.base
        out, at = [], 0
        while at < len(symbols):
            length, target = best[at]
            if length:
                out.append((starts[at], ends[at + length - 1], target))
                at += length
            else:
                at += 1
        return out


def make_glossary(
    pairs: Sequence[TermEntry | tuple[str, str]],
    places: list[str] | None = None,
    origin: str = "glossary",
) -> Glossary:
    """A glossary from term entries or (source, target) pairs; `places` (default `origin[i]`)
    name each in errors."""
    if len(pairs) > MAX_GLOSSARY_PAIRS:
        raise UserError(
            f"{origin}: {len(pairs)} term pairs; at most {MAX_GLOSSARY_PAIRS} are supported"
        )
    places = places or [f"{origin}[{i}]" for i in range(len(pairs))]
    targets: dict[tuple[str, ...], str] = {}
    entries: dict[str, TermEntry] = {}
    kept: list[tuple[str, str]] = []
    for where, item in zip(places, pairs):
        entry = checked(entry_of(item), where)
        source, target = entry.source, entry.target
        key = term_key(source)
        if key in targets and targets[key] != target:
            raise UserError(f"{where}: source term {source!r} is already given as {targets[key]!r}")
        entries[target] = _merged(entries.get(target), entry, where)
        if key not in targets:
            targets[key] = target
            kept.append((source, target))
    return Glossary(tuple(kept), targets, TermIndex(list(targets)), entries=entries)


def _merged(known: TermEntry | None, entry: TermEntry, where: str) -> TermEntry:
    """The entry of a target term given by several pairs: the first, its grammar completed by
    the later ones; a later one that contradicts it is an error."""
    if known is None:
        return entry
    for name in ("gender", "number"):
        mine, theirs = getattr(known, name), getattr(entry, name)
        if mine and theirs and mine != theirs:
            raise UserError(
                f"{where}: target term {entry.target!r} has {name} {theirs!r} here and "
                f"{mine!r} in an earlier pair"
            )
    return replace(
        known,
        gender=known.gender or entry.gender,
        number=known.number or entry.number,
        case_fixed=known.case_fixed or entry.case_fixed,
    )


def read_glossary(path: Path, src_lang: str | None = None, tgt_lang: str | None = None) -> Glossary:
    """A glossary from a file: TSV, CSV or TBX (`glossary_files.load_glossary_file`; `src_lang`,
    `tgt_lang` pick a TBX file's languages); a bad line is an error naming the file and line."""
    entries = load_glossary_file(path, src_lang, tgt_lang)
    return make_glossary(entries, [f"{path}:{e.line}" for e in entries], origin=str(path))


def read_constraints(path: Path) -> list[list[str]]:
    """Per input line, the target terms given directly: one JSON list of strings a line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read constraints {path}: {e}") from None
    out: list[list[str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        try:
            terms = json.loads(line) if line.strip() else []
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: not JSON ({e.msg}); give a list of target terms") from None
        out.append(check_terms(terms, where))
    return out


def check_terms(terms: object, where: str) -> list[str]:
    """`terms` as a list of non-empty target terms (a term given twice must appear twice), or
    an error naming `where`."""
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise UserError(f"{where}: constraints are a JSON list of strings (target terms)")
    clean: list[str] = []
    for term in terms:
        term = " ".join(term.split())
        if not term:
            raise UserError(f"{where}: a target term is empty")
        if len(term) > MAX_TERM_CHARS:
            raise UserError(f"{where}: a target term is over {MAX_TERM_CHARS} characters")
        clean.append(term)
    if len(clean) > MAX_CONSTRAINTS:
        raise UserError(
            f"{where}: {len(clean)} constraints; at most {MAX_CONSTRAINTS} for one sentence"
        )
    return clean


def term_ids(encode_tgt, terms: list[str], where: str, unk: int) -> tuple[tuple[int, ...], ...]:
    """Target token ids of each term, as the target tokenizer encodes it on its own (so as a
    word that starts after a space); an error when a term has too many constraints or tokens
    or pieces outside the vocabulary."""
    if len(terms) > MAX_CONSTRAINTS:
        raise UserError(
            f"{where}: {len(terms)} constraints; at most {MAX_CONSTRAINTS} for one sentence"
        )
    if not terms:
        return ()
    out = []
    for term, ids in zip(terms, encode_tgt(terms)):
        if not ids or len(ids) > MAX_TERM_TOKENS:
            raise UserError(
                f"{where}: target term {term!r} is {len(ids)} tokens; 1 to {MAX_TERM_TOKENS}"
            )
        if unk in ids:
            raise UserError(f"{where}: target term {term!r} has pieces the model cannot output")
        out.append(tuple(ids))
    return tuple(out)


def term_use(hypotheses: list[str], terms: list[list[str]]) -> dict[str, float]:
    """How many of each line's target terms its hypothesis holds, counted as constrained
    search counts them: whole words, case as written, a term listed n times needing n
    occurrences (see `occurrences`)."""
    total = used = 0
    for hyp, line_terms in zip(hypotheses, terms):
        for term, times in Counter(line_terms).items():
            total += times
            used += min(times, occurrences(term, hyp))
    return {"terms": total, "used": used, "rate": used / total if total else 1.0}


def occurrences(term: str, text: str) -> int:
    """How often `term` occurs in `text` with no word character touching either end: "l'hôtel"
    and "porte-hôtel" hold "hôtel" (the search counts a term glued after "'" or "-"), "hôtels"
    does not."""
    body = r"\s+".join(map(re.escape, term.split()))
    return len(re.findall(rf"(?<!{_WORD}){body}(?!{_WORD})", text))


def with_pairs(base: Glossary | None, pairs: list[tuple[str, str]], origin: str) -> Glossary:
    """`base` (a server's default glossary) with `pairs` added; a pair's source term given
    in both takes the target of `pairs`. `base` is used as it is, not rebuilt, and the glossary
    of the same `pairs` is built once for many requests (kept in REQUEST_GLOSSARIES)."""
    extra = REQUEST_GLOSSARIES.get(tuple((s, t) for s, t in pairs), origin)
    return extra if base is None else replace(extra, base=base)


# What a glossary holds beyond its objects' own sizes: per path unit, a slot in each of the
# index's four lists and a node number; per pair, its tuples, a dict entry and a length, and
# its target term's entry with that entry's dict slot.
_UNIT_BYTES = 4 * 8 + 32
_PAIR_BYTES = 2 * 56 + 8 * 8 + 2 * 8


def glossary_bytes(glossary: Glossary) -> int:
    """An estimate of the memory a glossary holds, not counting its `base`: its pairs, its
    folded source terms and its index (a node of the index for each unit of a folded term,
    at most, with its table of next units)."""
    size = sys.getsizeof(glossary.targets) + sys.getsizeof(glossary.pairs)
    size += sys.getsizeof(glossary.entries) + sum(map(sys.getsizeof, glossary.entries.values()))
    for source, target in glossary.pairs:
        size += sys.getsizeof(source) + sys.getsizeof(target) + _PAIR_BYTES
    table = sys.getsizeof({"": 0})  # a node's table of next units, with one or a few
    for key in glossary.targets:
        size += sys.getsizeof(key) + sum(sys.getsizeof(u) + table + _UNIT_BYTES for u in key)
    return size


class GlossaryCache:
    """Glossaries built from requests' term pairs, kept for the next request that gives the
    same pairs: bounded by their estimated memory (`glossary_bytes`), not by their number, as
    one request's glossary may hold a thousand times another's; the least recently used go
    first."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[tuple, tuple[Glossary, int]] = OrderedDict()
        self._lock = threading.Lock()  # requests are prepared on several threads

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, pairs: tuple[tuple[str, str], ...], origin: str) -> Glossary:
        """The glossary of `pairs` (errors name `origin`), built unless kept."""
        key = (pairs, origin)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key][0]
        glossary = make_glossary(list(pairs), origin=origin)  # outside the lock: it takes long
        # The key's own tuples and strings count too (when they are the pairs' strings,
        # twice: an estimate on the safe side).
        size = (
            glossary_bytes(glossary)
            + sys.getsizeof(pairs)
            + sum(sys.getsizeof(s) + sys.getsizeof(t) + 56 for s, t in pairs)
        )
        if size > self.max_bytes:
            return glossary
        with self._lock:
            if key not in self._kept:
                self._kept[key] = (glossary, size)
                self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._kept.popitem(last=False)
                self.bytes -= dropped
        return glossary

    def clear(self) -> None:
        """Keep no glossary."""
        with self._lock:
            self._kept.clear()
            self.bytes = 0


# The glossaries of servers' requests, one cache for the process as before it a function's
# lru_cache was: 64 MiB of them.
REQUEST_GLOSSARIES = GlossaryCache()
