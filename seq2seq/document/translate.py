"""Translate a document: its segments, deduplicated, through the tag machinery in batches; what
cannot be translated keeps its source text and is counted; the file rebuilt whole."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from seq2seq.decode.annotate import Annotation, annotate_sources
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.markup import MalformedMarkup, Marked, parse, reinsert
from seq2seq.decode.translator import Source, Translator
from seq2seq.document.formats import format_of, reader
from seq2seq.errors import UserError
from seq2seq.files import atomic_write

log = logging.getLogger(__name__)

# Segments decoded together: the progress bar moves this often, and it bounds the encoder outputs
# kept for alignment; within it the translator makes its own length-sorted batches, so fewer,
# larger chunks mean fewer half-full batches (a 50-page .docx: 889 search steps whole, 1,087 in
# chunks of 256, 1,774 in chunks of 64).
BATCH = 1024

# Why a segment kept its source text, as the report words it.
TOO_LONG = "too long for the model"
UNKNOWN = "a character the model cannot read"
FAILED = "failed to translate"


@dataclass
class Report:
    """What happened to a document's segments."""

    segments: int = 0  # in the document, repeats included
    unique: int = 0  # different segments with text to translate
    translated: int = 0  # of the unique ones
    kept: dict[str, int] = field(default_factory=dict)  # reason → unique segments kept as they were

    def summary(self) -> str:
        """One line for stderr."""
        line = (
            f"translated {self.translated} of {self.unique} different segments "
            f"({self.segments} in the document)"
        )
        order = [TOO_LONG, UNKNOWN, FAILED]  # one wording whatever order the segments came in
        reasons = sorted((why for why, n in self.kept.items() if n), key=order.index)
        kept = ", ".join(f"{self.kept[why]} {why}" for why in reasons)
        return f"{line}; kept in the source language: {kept}" if kept else line


def translate_document(
    translator: Translator,
    data: bytes,
    fmt: str,
    *,
    glossary: Glossary | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[bytes, Report]:
    """The file `data` (format `fmt`) translated, and the report; `progress(done, total)` is
    called once the file is read (0 done) and as each batch of segments is done."""
    document = reader(fmt)(data)
    texts = decoding_order(document.segments)
    report = Report(segments=len(document.segments), unique=len(texts))
    done: dict[str, str] = {}
    if progress is not None:
        progress(0, len(texts))
    for at in range(0, len(texts), BATCH):
        chunk = texts[at : at + BATCH]
        options = {"glossary": glossary, "src_lang": src_lang, "tgt_lang": tgt_lang}
        done.update(_translate_chunk(translator, chunk, options, report))
        if progress is not None:
            progress(len(chunk), len(texts))
    report.translated = sum(1 for s in texts if s in done)
    document.target_lang = translator.languages(src_lang, tgt_lang)[1]
    return document.rebuild([done.get(s, s) for s in document.segments]), report


def decoding_order(segments) -> list[str]:
    """The different segments with words to translate, shortest text first (markup aside): a
    chunk then holds segments of like length, whose batches pad and search little past their
    shortest."""
    texts = {s: plain(s) for s in dict.fromkeys(segments)}
    with_words = [s for s, text in texts.items() if any(c.isalpha() for c in text)]
    return sorted(with_words, key=lambda s: len(texts[s]))


def plain(segment: str) -> str:
    """A segment's text without its inline tags (as it is where its markup is malformed)."""
    try:
        return parse(segment, "xml").text
    except MalformedMarkup:
        return segment


def ready_segments(
    translator, chunk: list[str], report: Report, options=None, **prepare
) -> list[tuple[str, Marked, Source]]:
    """The segments of `chunk` parsed and prepared (`Translator.prepare`'s `options` and keywords),
    those that cannot be translated left out and counted in `report`."""
    parsed: list[tuple[str, Marked]] = []
    for segment in chunk:
        try:
            parsed.append((segment, parse(segment, "xml")))
        except MalformedMarkup:  # a format module's bug, not the user's: the text stays
            _kept(report, FAILED)
    sources = translator.prepare([m.text for _, m in parsed], options, truncate=False, **prepare)
    ready: list[tuple[str, Marked, Source]] = []
    for (segment, marked), source in zip(parsed, sources):
        why = _untranslatable(translator, source)
        if why is None:
            ready.append((segment, marked, source))
        else:
            _kept(report, why)
    return ready


def _translate_chunk(translator, chunk: list[str], options: dict, report: Report) -> dict[str, str]:
    """Translations of the segments of `chunk` that can be translated (the others counted);
    `options`: `Translator.prepare`'s glossary and languages (None: the translator's)."""
    ready = ready_segments(translator, chunk, report, **options)
    try:
        return _translated(translator, ready)
    except Exception as e:  # noqa: BLE001  one bad segment must not sink its batch: one by one
        log.info("a batch of %d segments failed (%s); translating them one by one", len(ready), e)
    out = {}
    for item in ready:
        try:
            out.update(_translated(translator, [item]))
        except Exception as e:  # noqa: BLE001
            log.warning("a segment kept its source text: %s", e)
            _kept(report, FAILED)
    return out


def _translated(translator, ready: list[tuple[str, Marked, Source]]) -> dict[str, str]:
    if not ready:
        return {}
    found = annotate_sources(translator, [s for *_, s in ready], Annotation(alignments=True))
    return {
        segment: reinsert(marked, a.text, a.alignment or [])
        for (segment, marked, _), a in zip(ready, found)
    }


def _untranslatable(translator: Translator, source: Source) -> str | None:
    """Why a prepared segment cannot be translated, or None."""
    if any(len(seq) > translator.max_src_len for seq in source.segments):
        return TOO_LONG
    unk = translator.tokenizer.ids.unk
    if any(unk in seq for seq in source.segments):
        return UNKNOWN
    return None


def _kept(report: Report, why: str) -> None:
    report.kept[why] = report.kept.get(why, 0) + 1


def translate_file(
    translator: Translator,
    source: Path,
    output: Path,
    *,
    fmt: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    **languages: str | None,
) -> Report:
    """Translate the file `source` into `output` (written whole, or not at all), its format
    `fmt` or its extension's; `languages`: src_lang and tgt_lang."""
    fmt = format_of(source, fmt)
    try:
        data = Path(source).read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {source}: {e.strerror}") from None
    translated, report = translate_document(translator, data, fmt, progress=progress, **languages)
    try:
        atomic_write(Path(output), lambda tmp: Path(tmp).write_bytes(translated))
    except OSError as e:
        raise UserError(f"cannot write {output}: {e.strerror}") from None
    return report
