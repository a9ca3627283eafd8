"""`seq2seq translate-file` and `translate_document` (issue 54 item 1): segments translated
through the tag machinery, a segment that cannot be translated kept and counted, nothing
written on a bad input."""

from __future__ import annotations

import shutil
import subprocess

import polib
import pytest
import torch

from seq2seq.config import DecodeConfig
from seq2seq.decode.annotate import Annotated
from seq2seq.decode.glossary import read_glossary
from seq2seq.decode.translator import Translator
from seq2seq.document import translate
from seq2seq.document.translate import FAILED, TOO_LONG, UNKNOWN, translate_document
from tests.document_cases import PO_METADATA
from tests.factories import tiny_translator, untrained_run
from tests.runs import cli

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    return untrained_run(tmp_path_factory.mktemp("doc-run"), demo_pairs[:300])


@pytest.fixture(scope="module")
def translator(tmp_path_factory, demo_pairs):
    return tiny_translator(
        tmp_path_factory.mktemp("doc-tok"), demo_pairs[:300], DecodeConfig(beam_size=1)
    )


def test_too_long_and_unreadable_segments_keep_their_source_and_are_counted(translator, demo_pairs):
    words = demo_pairs[0][0].rstrip(".").split()
    long = " ".join(words * 20)  # one sentence, far past the model's 64 positions
    data = f"{long}\n\n漢字漢字\n".encode()
    out, report = translate_document(translator, data, "text")
    assert out == data
    assert report.kept == {TOO_LONG: 1, UNKNOWN: 1} and report.translated == 0
    assert "kept in the source language: 1 too long" in report.summary()


def test_a_failing_segment_is_retried_alone_and_keeps_its_source(
    translator, demo_pairs, monkeypatch
):
    """A batch that fails is translated segment by segment; only the bad one stays as it was."""
    poison = demo_pairs[5][0]

    def annotate_sources(translator, sources, annotation):
        if any(s.tokens == len(translator.prepare([poison])[0].segments[0]) for s in sources):
            raise RuntimeError("boom")
        return [Annotated("done", 0.0, [(0, 0)]) for _ in sources]

    monkeypatch.setattr(translate, "annotate_sources", annotate_sources)
    first, second = demo_pairs[0][0], demo_pairs[1][0]
    data = f"<p>{first}</p>\n<p>{poison}</p>\n<p><b>{second}</b></p>\n".encode()
    out, report = translate_document(translator, data, "html")
    assert out.decode() == f"<p>done</p>\n<p>{poison}</p>\n<p><b>done</b></p>\n"
    assert report.kept == {FAILED: 1} and report.translated == 2


def test_repeated_segments_are_translated_once(translator, demo_pairs, monkeypatch):
    seen = []

    def annotate_sources(translator, sources, annotation):
        seen.extend(sources)
        return [Annotated("done", 0.0, [(0, 0)]) for _ in sources]

    monkeypatch.setattr(translate, "annotate_sources", annotate_sources)
    line = demo_pairs[0][0]
    out, report = translate_document(translator, f"{line}\n\n{line}\n".encode(), "text")
    assert out == b"done\n\ndone\n" and len(seen) == 1
    assert (report.segments, report.unique, report.translated) == (2, 1, 1)


def test_segments_go_to_the_decoder_shortest_first_and_come_back_in_place(
    translator, monkeypatch
):
    seen = []

    def annotate_sources(translator, sources, annotation):
        seen.extend(len(s.segments[0]) for s in sources)
        return [Annotated(str(len(s.segments[0])), 0.0, [(0, 0)]) for s in sources]

    monkeypatch.setattr(translate, "annotate_sources", annotate_sources)
    paragraphs = ["a longer paragraph of words", "hi", "a mid one", "hi"]
    out, _ = translate_document(translator, "\n\n".join(paragraphs).encode(), "text")
    assert len(seen) == 3 and seen == sorted(seen)
    lengths = [int(t) for t in out.decode().split("\n\n")]  # each paragraph's own, in place
    assert lengths[1] == lengths[3] < lengths[2] < lengths[0]


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("notes.pdf", b"%PDF-1.4", "PDF files (.pdf) are not translated; supported formats"),
        ("sheet.xlsx", b"PK", "spreadsheets files (.xlsx) are not translated"),
        ("data.bin", b"\x00", "cannot tell the format of data.bin"),
        ("broken.po", b"hello world\nfoo\n", "not a gettext catalog"),
        ("laughs.xlf", b'<!DOCTYPE x [<!ENTITY a "aa">]><x>&a;</x>', "DTD or entity"),
        ("latin1.txt", b"caf\xe9", "not UTF-8"),
    ],
)
def test_bad_input_is_one_error_and_writes_nothing(tmp_path, run, name, data, message):
    source, output = tmp_path / name, tmp_path / "out"
    source.write_bytes(data)
    output.write_bytes(b"before")
    result = cli("translate-file", source, output, "--run", run, code=1)
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.output and result.stderr.count("\n") == 1
    assert output.read_bytes() == b"before"
    assert {p.name for p in tmp_path.iterdir()} == {name, "out"}  # no temporary file left


@pytest.mark.slow
def test_markdown_file_translated_end_to_end(tmp_path, run, demo_pairs):
    a, b, c = (s for s, _ in demo_pairs[:3])
    source = tmp_path / "doc.md"
    source.write_text(
        f"# {a}\n\n{b} with `code()` and a [link](http://x.org/a_b).\n\n"
        f"```\nkeep me\n```\n\n- {c}\n"
    )
    result = cli("translate-file", source, tmp_path / "doc.fr.md", "--run", run, "--beam-size", "1")
    out = (tmp_path / "doc.fr.md").read_text()
    assert "translated 3 of 3 different segments (3 in the document)" in result.stderr
    assert out.startswith("# ") and "\n- " in out
    assert "`code()`" in out and "](http://x.org/a_b)" in out and "```\nkeep me\n```\n" in out
    assert a not in out and c not in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="msgfmt (Debian's gettext) is absent")
def test_po_file_translated_end_to_end_passes_msgfmt(tmp_path, run, demo_pairs):
    catalog = polib.POFile()
    catalog.metadata = dict(PO_METADATA)
    first, second = demo_pairs[0][0], demo_pairs[1][0]
    catalog.append(polib.POEntry(msgid=f"{first} %s", flags=["c-format"]))
    catalog.append(polib.POEntry(msgid=second, msgid_plural=f"%d {second}", flags=["c-format"]))
    catalog.save(str(tmp_path / "app.pot"))
    cli("translate-file", tmp_path / "app.pot", tmp_path / "fr.po", "--run", run)
    done = polib.pofile(str(tmp_path / "fr.po"))
    assert all(e.msgstr or e.msgstr_plural[0] for e in done)
    assert all("fuzzy" in e.flags for e in done)
    checked = subprocess.run(
        ["msgfmt", "--check", "--use-fuzzy", "-o", "/dev/null", str(tmp_path / "fr.po")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.slow
def test_html_inline_tags_come_back_once_each_around_model_output(translator, demo_pairs):
    words = demo_pairs[0][0].split()
    page = f"<p>{' '.join(words[:2])} <b>{' '.join(words[2:4])}</b> {' '.join(words[4:])}</p>"
    data = f'<html><body>{page}\n<img src="a.png" alt="{demo_pairs[1][0]}"></body></html>'
    out, report = translate_document(translator, data.encode(), "html")
    text = out.decode()
    assert report.translated == 2 and not report.kept
    assert text.startswith("<html><body><p>") and text.endswith('"></body></html>')
    assert text.count("<b>") == 1 and text.count("</b>") == 1
    assert text.index("<b>") < text.index("</b>") and '<img src="a.png" alt="' in text
    assert demo_pairs[1][0] not in text


@pytest.mark.slow
def test_a_glossary_term_reaches_the_translated_document(translator, demo_pairs, tmp_path):
    source = demo_pairs[0][0]
    (tmp_path / "terms.tsv").write_text(f"{source.split()[-1].rstrip('.')}\tparc\n")
    glossary = read_glossary(tmp_path / "terms.tsv")
    beam = Translator(translator.model, translator.tokenizer, DecodeConfig(beam_size=4), CPU)
    out, report = translate_document(beam, f"{source}\n".encode(), "text", glossary=glossary)
    assert report.translated == 1 and "parc" in out.decode()
