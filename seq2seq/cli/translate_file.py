"""`seq2seq translate-file`: translate a document or localization file whole (document/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import (
    BatchSize,
    Checkpoint,
    Device,
    SrcLang,
    TgtLang,
    decode_settings,
    global_options,
    user_errors,
)

FileIn = Annotated[
    Path, typer.Argument(metavar="IN", help="The file to translate.", show_default=False)
]
FileOut = Annotated[
    Path,
    typer.Argument(
        metavar="OUT", help="Where its translation goes (written whole, or not at all)."
    ),
]
FileFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="text, markdown, html, srt, vtt, po, xliff, docx, pptx, odt or odp (default: from "
        "IN's extension).",
    ),
]
FileGlossary = Annotated[
    Path | None,
    typer.Option(
        "--glossary",
        help="TSV of `source term<TAB>target term`, each kept where its source term occurs "
        "(needs beam ≥ 2).",
    ),
]
FileBeamSize = Annotated[
    int | None,
    typer.Option(help="Beam width; 1 is greedy (default: the run's decode.beam_size)."),
]


@user_errors
def translate_file(
    ctx: typer.Context,
    source: FileIn,
    output: FileOut,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    fmt: FileFormat = None,
    glossary: FileGlossary = None,
    beam_size: FileBeamSize = None,
    batch_size: BatchSize = None,
    src_lang: SrcLang = None,
    tgt_lang: TgtLang = None,
    checkpoint: Checkpoint = None,
    device: Device = "auto",
) -> None:
    """Translate a document or localization file, keeping its formatting and structure.

    Text, Markdown, HTML, subtitles (.srt, .vtt), gettext (.po, .pot), XLIFF 1.2/2.x, Word and
    PowerPoint (.docx, .pptx) and OpenDocument (.odt, .odp).

    Inline formatting follows the word alignment; code, markup and placeholders stay as they
    were; gettext and XLIFF get their missing translations, marked machine-made. A segment that
    cannot be translated keeps its source text and is counted on stderr.

    Examples:\n
      seq2seq translate-file README.md README.fr.md --run runs/demo\n
      seq2seq translate-file messages.pot fr.po --run runs/en-fr --beam-size 5\n
      seq2seq translate-file page.txt page.fr.txt --run runs/demo --format html
    """
    from tqdm import tqdm

    from seq2seq.decode.glossary import read_glossary
    from seq2seq.decode.translator import load_translator
    from seq2seq.document.formats import format_of
    from seq2seq.document.translate import translate_file as run_job

    fmt = format_of(source, fmt)  # a bad extension is refused before the model loads
    decode = decode_settings(run, beam_size=beam_size, batch_size=batch_size)
    terms = read_glossary(glossary, src_lang, tgt_lang) if glossary is not None else None
    translator, _ = load_translator(
        run, checkpoint, device, decode=decode, glossary=terms, src_lang=src_lang, tgt_lang=tgt_lang
    )
    quiet = bool(global_options(ctx).get("quiet"))
    bars: list = []  # made once the file is read: a bad file is one line of error, no bar

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, unit="segment", disable=quiet, file=sys.stderr))
        bars[0].update(done)

    try:
        report = run_job(translator, source, output, fmt=fmt, progress=progress)
    finally:
        for bar in bars:
            bar.close()
    print(report.summary(), file=sys.stderr)
