"""Documents and localization files read into segments and rebuilt whole (issue 54 item 1).

A stub translation upper-cases each segment's text and keeps its tags, and goes through each
format's own rebuild, as `translate_document` does with a model's output.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polib
import pytest
from lxml import etree

from seq2seq.document import htmlpage, markdown, plaintext, po, subtitles, xliff
from seq2seq.document.formats import format_of, reader
from seq2seq.errors import UserError
from tests.document_cases import PO_METADATA, XLIFF_2, XLIFF_12, XLIFF_SEGMENTED, shout, translated


def test_plain_text_keeps_paragraphs_and_blank_lines():
    data = b"Hello world.\nSecond line.\n\n\n  Indented para & more.\n"
    segments, out = translated(plaintext.read, data)
    assert segments == ["Hello world. Second line.", "Indented para &amp; more."]
    assert out.decode() == "HELLO WORLD. SECOND LINE.\n\n\n  INDENTED PARA & MORE.\n"


def test_text_not_utf8_is_an_error():
    with pytest.raises(UserError, match="not UTF-8"):
        plaintext.read(b"caf\xe9\n")


MARKDOWN = """# A title #

Some *stress* and **bold** text with `inline_code()` and a [link](http://x.org/a_b "t").
Second line, snake_case.

> quoted text

- item [ref link][ref] ![a picture](pic.png)

| head one | head two |
|---|---|
| cell one | cell two |

```python
print("code block")
```

[ref]: http://ref.example/path
"""


def test_markdown_translates_text_and_leaves_code_and_urls():
    segments, out = translated(markdown.read, MARKDOWN.encode())
    text = out.decode()
    assert len(segments) == 8
    assert "# A TITLE #" in text
    assert "SOME *STRESS* AND **BOLD** TEXT WITH `inline_code()` AND A " in text
    assert '[LINK](http://x.org/a_b "t"). SECOND LINE, SNAKE_CASE.' in text
    assert "> QUOTED TEXT" in text
    assert "- ITEM [REF LINK][ref] ![a picture](pic.png)" in text
    assert "| HEAD ONE | HEAD TWO |" in text and "| CELL ONE | CELL TWO |" in text
    assert '```python\nprint("code block")\n```' in text
    assert "[ref]: http://ref.example/path" in text


def test_markdown_front_matter_and_bare_urls_are_left_alone():
    data = b"---\ntitle: My page\ntags: [a, b]\n---\n\nSee https://example.org/a_b, then go.\n"
    segments, out = translated(markdown.read, data)
    assert segments == ["See <x1/>, then go."]
    assert (
        out == b"---\ntitle: My page\ntags: [a, b]\n---\n\nSEE https://example.org/a_b, THEN GO.\n"
    )


def test_markdown_untranslated_is_byte_identical():
    document = markdown.read(MARKDOWN.encode())
    assert document.rebuild(document.segments) == MARKDOWN.encode()


PAGE = """<!DOCTYPE html>
<html lang="en"><head><title>My page</title>
<meta name="description" content="A page about cats"><meta charset="utf-8" content="x">
<style>p { color: red }</style><script>var a = "<b>no</b>";</script></head>
<body>
<h1 title="Main title">Hello &amp; welcome</h1>
<p>Press <b>Save</b> and <a href="/x?a=1&amp;b=2">read more</a>.<br>Run <code>rm -rf</code> now.</p>
<p translate="no">Brand Name</p>
<ul><li>One <img src="a.png" alt="a cat"> item</li><li>Two</li></ul>
<!-- a comment -->
</body></html>
"""


def test_html_translates_text_inline_elements_and_attributes():
    segments, out = translated(htmlpage.read, PAGE.encode())
    text = out.decode()
    assert "<title>MY PAGE</title>" in text
    assert (
        '<meta name="description" content="A PAGE ABOUT CATS"><meta charset="utf-8" content="x">'
        in text
    )
    assert '<h1 title="MAIN TITLE">HELLO &amp; WELCOME</h1>' in text
    assert '<p>PRESS <b>SAVE</b> AND <a href="/x?a=1&amp;b=2">READ MORE</a>.<br>RUN ' in text
    assert "<code>rm -rf</code> NOW.</p>" in text
    assert '<li>ONE <img src="a.png" alt="A CAT"> ITEM</li><li>TWO</li>' in text
    assert len(segments) == 8


def test_html_leaves_script_style_and_translate_no_alone():
    _, out = translated(htmlpage.read, PAGE.encode())
    text = out.decode()
    assert '<script>var a = "<b>no</b>";</script>' in text
    assert "<style>p { color: red }</style>" in text
    assert '<p translate="no">Brand Name</p>' in text
    assert "<!-- a comment -->" in text and text.startswith('<!DOCTYPE html>\n<html lang="en">')


def test_html_untranslated_is_byte_identical():
    document = htmlpage.read(PAGE.encode())
    assert document.rebuild(document.segments) == PAGE.encode()


SRT = """1
00:00:01,000 --> 00:00:02,500
Hello <i>there</i>, how
are you today?

2
00:00:03,000 --> 00:00:04,000
Fine, thanks.
"""

VTT = """WEBVTT

NOTE written by hand

cue-1
00:01.000 --> 00:02.000 align:start
<v Bob>Hello &amp; welcome</v> to
the show

00:02.000 --> 00:03.000
Two <c.yellow>words</c>
"""


def test_srt_keeps_numbers_and_timing_and_rewraps_within_the_cue():
    segments, out = translated(subtitles.read_srt, SRT.encode())
    assert segments == ["Hello <g1>there</g1>, how are you today?", "Fine, thanks."]
    blocks = out.decode().split("\n\n")
    assert blocks[0].splitlines()[:2] == ["1", "00:00:01,000 --> 00:00:02,500"]
    assert blocks[0].splitlines()[2:] == ["HELLO <i>THERE</i>, HOW", "ARE YOU TODAY?"]
    assert blocks[1] == "2\n00:00:03,000 --> 00:00:04,000\nFINE, THANKS.\n"


def test_srt_cues_without_a_blank_line_between_stay_apart():
    data = SRT.replace("today?\n\n2\n", "today?\n2\n").encode()
    segments, out = translated(subtitles.read_srt, data)
    assert segments == ["Hello <g1>there</g1>, how are you today?", "Fine, thanks."]
    assert out.decode().endswith(
        "ARE YOU TODAY?\n2\n00:00:03,000 --> 00:00:04,000\nFINE, THANKS.\n"
    )


def test_vtt_keeps_header_notes_settings_and_cue_tags():
    _, out = translated(subtitles.read_vtt, VTT.encode())
    text = out.decode()
    assert text.startswith(
        "WEBVTT\n\nNOTE written by hand\n\ncue-1\n00:01.000 --> 00:02.000 align:start\n"
    )
    assert "<v Bob>HELLO &amp; WELCOME</v>" in text
    assert "TWO <c.yellow>WORDS</c>" in text
    assert len(text.split("\n\n")[2].splitlines()) == 4  # id, timing and the cue's two lines


def test_vtt_without_its_header_is_an_error():
    with pytest.raises(UserError, match="WEBVTT"):
        subtitles.read_vtt(b"00:01.000 --> 00:02.000\nHi\n")


def catalog() -> polib.POFile:
    catalog = polib.POFile()
    catalog.metadata = dict(PO_METADATA)
    catalog.append(polib.POEntry(msgid="Hello %s, you have %d new files", flags=["c-format"]))
    catalog.append(polib.POEntry(msgid="Open the {0} file\n", flags=["python-brace-format"]))
    catalog.append(polib.POEntry(msgid="&Save as %(name)s", flags=["python-format"]))
    catalog.append(polib.POEntry(msgid="One file", msgid_plural="%d files", flags=["c-format"]))
    catalog.append(polib.POEntry(msgid="Already done", msgstr="Déjà fait"))
    return catalog


def test_po_fills_msgstr_and_plurals_marked_fuzzy_placeholders_kept():
    segments, out = translated(po.read, str(catalog()).encode())
    assert "Hello <x1/>, you have <x2/> new files" in segments
    done = polib.pofile(out.decode())
    by_id = {e.msgid: e for e in done}
    assert by_id["Hello %s, you have %d new files"].msgstr == "HELLO %s, YOU HAVE %d NEW FILES"
    assert by_id["Open the {0} file\n"].msgstr == "OPEN THE {0} FILE\n"
    assert by_id["&Save as %(name)s"].msgstr == "&SAVE AS %(name)s"
    plural = by_id["One file"]
    assert plural.msgstr_plural == {0: "ONE FILE", 1: "%d FILES"}
    assert all("fuzzy" in by_id[k].flags for k in by_id if k != "Already done")
    assert (
        by_id["Already done"].msgstr == "Déjà fait" and "fuzzy" not in by_id["Already done"].flags
    )


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="msgfmt (Debian's gettext) is absent")
def test_po_output_passes_msgfmt_check(tmp_path):
    _, out = translated(po.read, str(catalog()).encode())
    (tmp_path / "fr.po").write_bytes(out)
    done = subprocess.run(
        [
            "msgfmt",
            "--check",
            "--use-fuzzy",
            "-o",
            str(tmp_path / "fr.mo"),
            str(tmp_path / "fr.po"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_po_unnamed_directives_stay_in_source_order():
    document = po.read(str(catalog()).encode())
    swapped = "<x2/> new files, you have hello <x1/>"
    i = document.segments.index("Hello <x1/>, you have <x2/> new files")
    out = document.rebuild([swapped if k == i else s for k, s in enumerate(document.segments)])
    entry = polib.pofile(out.decode()).find("Hello %s, you have %d new files")
    assert entry.msgstr == "%s new files, you have hello %d"


def test_corrupt_po_is_an_error():
    with pytest.raises(UserError, match="gettext"):
        po.read(b'msgid "open\nmsgstr 12 "x"\n')


def test_po_of_one_line_is_not_read_as_a_path():
    """polib reads a string naming an existing file as that file."""
    with pytest.raises(UserError, match="not a gettext catalog"):
        po.read(b"/etc/hostname")


NS_12 = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
NS_2 = {"x": "urn:oasis:names:tc:xliff:document:2.0"}


def test_xliff_12_targets_keep_inline_codes_and_say_machine_translated():
    segments, out = translated(xliff.read, XLIFF_12)
    assert segments == ["Press <g1>Save</g1> now<x3/>.", "<x1/>Bold<x2/> text <x3/>"]
    root = etree.fromstring(out)
    targets = root.findall(".//x:trans-unit/x:target", NS_12)
    first = etree.tostring(targets[0], encoding=str, with_tail=False)
    assert '<g id="1">SAVE</g> NOW<x id="2"/>.</target>' in first
    assert targets[0].get("state") == "needs-review-translation"
    assert targets[0].get("state-qualifier") == "mt-suggestion"
    assert targets[1].text == "Fait" and targets[1].get("state") is None
    third = etree.tostring(targets[2], encoding=str, with_tail=False)
    assert '<bx id="3"/>BOLD<ex id="3"/> TEXT <ph id="4">%s</ph>' in third


def test_xliff_2_targets_keep_pc_and_ph_and_mark_the_segment():
    _, out = translated(xliff.read, XLIFF_2)
    root = etree.fromstring(out)
    segment = root.find(".//x:segment", NS_2)
    assert segment.get("state") == "translated"
    target = etree.tostring(segment.find("x:target", NS_2), encoding=str, with_tail=False)
    assert 'CLICK <pc id="1">HERE</pc> <ph id="2"/></target>' in target


def test_xliff_text_marked_not_to_translate_stays_as_it_was():
    data = XLIFF_2.replace(b"here</pc>", b'here</pc> <mrk id="m" translate="no">Acme Box</mrk>')
    segments, out = translated(xliff.read, data)
    assert segments == ["Click <g1>here</g1> <x3/> <x4/>"]
    target = etree.fromstring(out).find(".//x:segment/x:target", NS_2)
    assert '<mrk id="m" translate="no">Acme Box</mrk>' in etree.tostring(target, encoding=str)


def test_xliff_12_seg_source_sentences_fill_their_own_mrk_in_the_target():
    """CAT tools (Trados, memoQ) segment a unit into `<mrk mtype="seg">`: each is one segment,
    and the target holds the same mrks."""
    segments, out = translated(xliff.read, XLIFF_SEGMENTED)
    assert segments == ["First one.", "Second <g1>one</g1>."]
    target = etree.fromstring(out).find(".//x:trans-unit/x:target", NS_12)
    written = etree.tostring(target, encoding=str, with_tail=False)
    assert '<mrk mtype="seg" mid="1">FIRST ONE.</mrk> <mrk mtype="seg" mid="2">SECOND ' in written
    assert '<g id="1">ONE</g>.</mrk></target>' in written
    assert target.getprevious().tag.endswith("seg-source")
    assert target.get("state") == "needs-review-translation"


EXTERNAL = b"""<?xml version="1.0"?>
<!DOCTYPE xliff [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file><body>
<trans-unit id="1"><source>&secret;</source></trans-unit></body></file></xliff>
"""

LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file><body>
<trans-unit id="1"><source>&lol3;</source></trans-unit></body></file></xliff>
"""


@pytest.mark.parametrize("data", [EXTERNAL, LAUGHS], ids=["external entity", "billion laughs"])
def test_xliff_with_entities_is_refused(data):
    with pytest.raises(UserError, match="DTD or entity"):
        xliff.read(data)


def test_malformed_xliff_is_an_error():
    with pytest.raises(UserError, match="malformed"):
        xliff.read(XLIFF_12[:200])


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("a.txt", "text"),
        ("b.MD", "markdown"),
        ("c.htm", "html"),
        ("d.srt", "srt"),
        ("e.vtt", "vtt"),
        ("f.pot", "po"),
        ("g.xlf", "xliff"),
    ],
)
def test_format_comes_from_the_extension(name, fmt):
    assert format_of(Path(name)) == fmt
    assert reader(fmt) is not None


@pytest.mark.parametrize("name", ["report.pdf", "table.xlsx"])
def test_pdf_and_spreadsheets_are_refused_naming_the_formats(name):
    with pytest.raises(UserError, match=r"not translated; supported formats: text \(.txt"):
        format_of(Path(name))


def test_unknown_extension_and_format_are_errors():
    with pytest.raises(UserError, match="cannot tell the format of a.bin"):
        format_of(Path("a.bin"))
    with pytest.raises(UserError, match="unknown format 'rtf'"):
        format_of(Path("a.txt"), "rtf")


def _with_target_language(sample: bytes, lang: str) -> bytes:
    """An XLIFF sample whose target language is `lang` (empty: none named), rebuilt naming "fr"."""
    for named in (b' trgLang="fr"', b' target-language="fr"'):
        sample = sample.replace(named, named.replace(b'"fr"', b'"%s"' % lang) if lang else b"")
    document = xliff.read(sample)
    document.target_lang = "fr"
    return document.rebuild([shout(s) for s in document.segments])


def test_xliff_targets_are_named_in_the_target_language_unless_the_file_names_one():
    assert b'trgLang="fr"' in _with_target_language(XLIFF_2, "")
    assert b'target-language="fr"' in _with_target_language(XLIFF_12, "")
    assert b'trgLang="de"' in _with_target_language(XLIFF_2, b"de")
    assert b'target-language="de"' in _with_target_language(XLIFF_12, b"de")
