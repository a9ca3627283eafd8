"""The formats a document may be in: extension and `--format` name → the module that reads it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from seq2seq.document import htmlpage, markdown, odf, ooxml, plaintext, po, subtitles, xliff
from seq2seq.document.segments import Document
from seq2seq.errors import UserError

# --format name → (its reader, `read(data) -> Document`, and the extensions that mean it).
FORMATS: dict[str, tuple[Callable[[bytes], Document], tuple[str, ...]]] = {
    "text": (plaintext.read, (".txt", ".text")),
    "markdown": (markdown.read, (".md", ".markdown")),
    "html": (htmlpage.read, (".html", ".htm", ".xhtml")),
    "srt": (subtitles.read_srt, (".srt",)),
    "vtt": (subtitles.read_vtt, (".vtt",)),
    "po": (po.read, (".po", ".pot")),
    "xliff": (xliff.read, (".xlf", ".xliff")),
    "docx": (ooxml.read, (".docx",)),
    "pptx": (ooxml.read, (".pptx",)),
    "odt": (odf.read, (".odt",)),
    "odp": (odf.read, (".odp",)),
}
# Asked for often, not read this round: refused by name.
REFUSED = {
    ".pdf": "PDF",
    ".xlsx": "spreadsheets",
    ".xls": "spreadsheets",
    ".ods": "spreadsheets",
    ".csv": "spreadsheets",
}


def supported() -> str:
    """The formats and their extensions, for messages and help."""
    return ", ".join(f"{name} ({' '.join(exts)})" for name, (_, exts) in FORMATS.items())


def format_of(path: Path, given: str | None = None) -> str:
    """The format name of a file: `given` (checked), else from its extension."""
    if given is not None:
        if given not in FORMATS:
            raise UserError(f"unknown format {given!r}: the formats are {', '.join(FORMATS)}")
        return given
    ext = Path(path).suffix.lower()
    if ext in REFUSED:
        raise UserError(
            f"{REFUSED[ext]} files ({ext}) are not translated; supported formats: {supported()}"
        )
    for name, (_, exts) in FORMATS.items():
        if ext in exts:
            return name
    raise UserError(
        f"cannot tell the format of {Path(path).name} from its extension "
        f"{ext or '(none)'}; supported formats: {supported()} (or say --format)"
    )


def reader(fmt: str) -> Callable[[bytes], Document]:
    """The `read(data) -> Document` of format `fmt`."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}: the formats are {', '.join(FORMATS)}")
    return FORMATS[fmt][0]
