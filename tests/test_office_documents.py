"""Office documents (.docx, .pptx, .odt, .odp) through read and rebuild: every paragraph of every
part translated, every run's formatting around its own words, the rest of the file untouched.

Files are built with the libraries people write them with (python-docx, python-pptx, odfpy) and
reopened with them; "translation" upper-cases the text between tags, so each word shows whether
it went through and where its formatting went.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
from pathlib import Path

import pytest
from docx import Document as WordDocument
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part
from docx.oxml import parse_xml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree
from odf import teletype
from odf.draw import Frame, Image, Page, TextBox
from odf.opendocument import OpenDocumentPresentation, OpenDocumentText, load
from odf.presentation import Notes
from odf.style import Header, MasterPage, PageLayout, Style, TextProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import A, Note, NoteBody, NoteCitation, P, Span
from PIL import Image as PILImage
from pptx import Presentation
from pptx.util import Inches

from seq2seq.decode.markup import parse, reinsert
from seq2seq.document import odf, ooxml, zipdoc
from seq2seq.document.formats import format_of, reader
from seq2seq.errors import UserError

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
WNS = f'xmlns:w="{W}"'
URL = "https://example.com/save"


def shout(segment: str) -> str:
    """A stand-in translation: the text between tags and entities upper-cased."""
    return "".join(
        part if part.startswith(("<", "&")) else part.upper()
        for part in re.split(r"(<[^>]*>|&\w+;)", segment)
    )


def translated(module, data: bytes) -> bytes:
    """The file with every segment 'translated' by `shout`."""
    document = module.read(data)
    return document.rebuild([shout(s) for s in document.segments])


def members(data: bytes) -> dict[str, bytes]:
    """A zip's parts by name."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def layout(data: bytes) -> list[tuple[str, int]]:
    """A zip's parts in order, each with its compression."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, info.compress_type) for info in archive.infolist()]


def zipped(parts: dict[str, bytes]) -> bytes:
    """A zip of `parts`, deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in parts.items():
            archive.writestr(name, body)
    return out.getvalue()


def png() -> bytes:
    """A small picture."""
    out = io.BytesIO()
    PILImage.new("RGB", (4, 4), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def saved(document) -> bytes:
    """A python-docx, python-pptx or odfpy document as bytes."""
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# --- .docx ----------------------------------------------------------------------------------


def word_file() -> bytes:
    """A .docx with formatted runs, a link, a field, a tab, a table, a picture, a text box, a
    header, a footer, a footnote and a comment."""
    document = WordDocument()
    document.add_heading("Annual report", level=1)
    paragraph = document.add_paragraph("Press ")
    paragraph.add_run("Save").bold = True
    paragraph.add_run(" and then ")
    paragraph.add_run("wait").italic = True
    paragraph.add_run(" or visit ")
    rid = paragraph.part.relate_to(URL, RT.HYPERLINK, is_external=True)
    paragraph._p.append(
        parse_xml(
            f'<w:hyperlink {WNS} xmlns:r="http://schemas.openxmlformats.org/officeDocument/'
            f'2006/relationships" r:id="{rid}"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/>'
            "</w:rPr><w:t>our site</w:t></w:r></w:hyperlink>"
        )
    )
    fields = document.add_paragraph("Page ")
    for run in (
        '<w:fldChar w:fldCharType="begin"/>',
        '<w:instrText xml:space="preserve"> PAGE </w:instrText>',
        '<w:fldChar w:fldCharType="separate"/>',
        "<w:t>7</w:t>",
        '<w:fldChar w:fldCharType="end"/>',
        "<w:tab/>",
        "<w:t>of the book</w:t>",
    ):
        fields._p.append(parse_xml(f"<w:r {WNS}>{run}</w:r>"))
    document.add_paragraph("")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Left cell"
    table.cell(0, 1).text = "Right cell"
    document.add_picture(io.BytesIO(png()))
    boxed = document.add_paragraph("Before the box ")
    boxed._p.append(
        parse_xml(
            f'<w:r {WNS} xmlns:v="urn:schemas-microsoft-com:vml"><w:pict>'
            '<v:shape style="width:100pt;height:40pt"><v:textbox><w:txbxContent>'
            "<w:p><w:r><w:t>Words in a box</w:t></w:r></w:p>"
            "</w:txbxContent></v:textbox></v:shape></w:pict></w:r>"
        )
    )
    section = document.sections[0]
    section.header.paragraphs[0].text = "Header words"
    section.footer.paragraphs[0].text = "Footer words"
    noted = document.add_paragraph("A claim")
    noted._p.append(parse_xml(f'<w:r {WNS}><w:footnoteReference w:id="1"/></w:r>'))
    document.add_comment(noted.runs[0], text="Comment words", author="Ann")
    _add_footnotes(document)
    return saved(document)


def _add_footnotes(document) -> None:
    """A footnotes part (python-docx writes none) with Word's separators and one footnote."""
    xml = (
        f"<w:footnotes {WNS}>"
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        "</w:footnote>"
        '<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r>'
        '<w:r><w:t xml:space="preserve"> Footnote words</w:t></w:r></w:p></w:footnote>'
        "</w:footnotes>"
    ).encode()
    part = Part(PackURI("/word/footnotes.xml"), CT.WML_FOOTNOTES, xml, document.part.package)
    document.part.relate_to(part, RT.FOOTNOTES)


def word_texts(data: bytes, part: str) -> list[str]:
    """The text of each paragraph of a .docx part, read straight from its XML."""
    root = etree.fromstring(members(data)[part])
    return [
        "".join(t.text or "" for t in p.iter(f"{{{W}}}t"))
        for p in root.iter(f"{{{W}}}p")
        if not p.findall(f".//{{{W}}}p")
    ]


def test_docx_every_paragraph_comes_back_translated_and_reopens():
    data = word_file()
    out = translated(ooxml, data)
    before, after = WordDocument(io.BytesIO(data)), WordDocument(io.BytesIO(out))
    assert [p.text.upper() for p in before.paragraphs] == [p.text for p in after.paragraphs]
    assert after.paragraphs[0].style.name == "Heading 1"
    assert [c.text for c in after.tables[0].rows[0].cells] == ["LEFT CELL", "RIGHT CELL"]
    section = after.sections[0]
    assert section.header.paragraphs[0].text == "HEADER WORDS"
    assert section.footer.paragraphs[0].text == "FOOTER WORDS"
    assert word_texts(out, "word/footnotes.xml") == ["", " FOOTNOTE WORDS"]
    assert "WORDS IN A BOX" in word_texts(out, "word/document.xml")
    assert word_texts(out, "word/comments.xml") == ["COMMENT WORDS"]


def test_docx_runs_keep_their_formatting_around_their_own_words():
    out = translated(ooxml, word_file())
    paragraph = WordDocument(io.BytesIO(out)).paragraphs[1]
    runs = [(r.text, r.bold, r.italic) for r in paragraph.runs]
    assert ("SAVE", True, None) in runs
    assert ("WAIT", None, True) in runs
    assert [t for t, bold, italic in runs if bold or italic] == ["SAVE", "WAIT"]
    (link,) = paragraph.hyperlinks
    assert (link.text, link.address) == ("OUR SITE", URL)
    assert link.runs[0]._r.rPr.rStyle.val == "Hyperlink"


def test_docx_fields_tabs_pictures_and_note_references_are_placeholders_kept_whole():
    data = word_file()
    segments = ooxml.read(data).segments
    assert "Press <r2>Save</r2> and then <r3>wait</r3> or visit <a1><r4>our site</r4></a1>" in (
        segments
    )
    assert "Page <x1/>7<x2/>of the book" in segments
    out = translated(ooxml, data)
    body = members(out)["word/document.xml"].decode()
    assert '<w:instrText xml:space="preserve"> PAGE </w:instrText>' in body
    assert body.count("<w:fldChar") == 3 and "<w:tab/>" in body
    assert '<w:footnoteReference w:id="1"/>' in body
    assert "<w:drawing>" in body


def test_docx_pictures_styles_and_every_other_part_stay_byte_identical():
    data = word_file()
    out = translated(ooxml, data)
    before, after = members(data), members(out)
    rewritten = {"word/document.xml", "word/footnotes.xml", "word/comments.xml"}
    rewritten |= {n for n in before if re.fullmatch(r"word/(header|footer)\d*\.xml", n)}
    assert layout(out) == layout(data)
    assert any(n.startswith("word/media/") for n in before)
    for name in set(before) - rewritten:
        assert after[name] == before[name], name
    assert all(after[n] != before[n] for n in rewritten)


def test_docx_untranslated_rebuild_reads_back_the_same_segments():
    data = word_file()
    document = ooxml.read(data)
    assert ooxml.read(document.rebuild(document.segments)).segments == document.segments


def test_docx_namespace_prefixes_and_declaration_survive():
    # Word refuses a file whose mc:Ignorable names a prefix that is no longer declared.
    data = word_file()
    before = etree.fromstring(members(data)["word/document.xml"])
    body = members(translated(ooxml, data))["word/document.xml"]
    after = etree.fromstring(body)
    assert body.startswith(b"<?xml version='1.0' encoding='UTF-8' standalone='yes'?>")
    assert after.nsmap == before.nsmap and after.attrib == before.attrib
    assert b"<w:document " in body and b"<w:body>" in body


def test_a_translation_that_loses_a_placeholder_still_keeps_what_it_stood_for():
    data = word_file()
    document = ooxml.read(data)
    lost = [re.sub(r"<x\d+/>", "", s) for s in document.segments]
    body = members(document.rebuild(lost))["word/document.xml"].decode()
    assert body.count("<w:fldChar") == 3 and "Words in a box" in body


# --- .pptx ----------------------------------------------------------------------------------


def slides_file() -> bytes:
    """A .pptx with a title, formatted runs and a link, a table, a picture and speaker notes."""
    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Quarterly results"
    paragraph = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(5), Inches(1)).text_frame
    paragraph = paragraph.paragraphs[0]
    for text, bold, link in (
        ("Press ", None, None),
        ("Save", True, None),
        (" or see ", None, None),
        ("the site", None, URL),
    ):
        run = paragraph.add_run()
        run.text = text
        run.font.bold = bold
        if link:
            run.hyperlink.address = link
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text = "Left cell"
    table.cell(0, 1).text = "Right cell"
    slide.shapes.add_picture(io.BytesIO(png()), Inches(6), Inches(1))
    slide.notes_slide.notes_text_frame.text = "Speaker notes"
    return saved(presentation)


def test_pptx_slides_tables_and_notes_come_back_translated_with_their_formatting():
    data = slides_file()
    out = translated(ooxml, data)
    slide = Presentation(io.BytesIO(out)).slides[0]
    assert slide.shapes.title.text == "QUARTERLY RESULTS"
    box = next(s for s in slide.shapes if s.has_text_frame and "PRESS" in s.text_frame.text)
    runs = box.text_frame.paragraphs[0].runs
    assert [(r.text, r.font.bold) for r in runs if r.font.bold] == [("SAVE", True)]
    assert [(r.text, r.hyperlink.address) for r in runs if r.hyperlink.address] == [
        ("THE SITE", URL)
    ]
    assert "".join(r.text for r in runs) == "PRESS SAVE OR SEE THE SITE"
    table = next(s for s in slide.shapes if s.has_table).table
    assert [table.cell(0, i).text for i in (0, 1)] == ["LEFT CELL", "RIGHT CELL"]
    assert slide.notes_slide.notes_text_frame.text == "SPEAKER NOTES"


def test_pptx_pictures_layouts_and_masters_stay_byte_identical():
    data = slides_file()
    out = translated(ooxml, data)
    before, after = members(data), members(out)
    assert layout(out) == layout(data)
    changed = {n for n in before if after[n] != before[n]}
    assert changed == {"ppt/slides/slide1.xml", "ppt/notesSlides/notesSlide1.xml"}
    assert any(n.startswith("ppt/media/") for n in before)


# --- .odt and .odp --------------------------------------------------------------------------


def text_file() -> bytes:
    """An .odt with a bold span, a link, a table, a header, a footnote and a picture."""
    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    page = PageLayout(name="Page")
    document.automaticstyles.addElement(page)
    master = MasterPage(name="Standard", pagelayoutname=page)
    header = Header()
    header.addElement(P(text="Header words"))
    master.addElement(header)
    document.masterstyles.addElement(master)
    paragraph = P(text="Press ")
    paragraph.addElement(Span(stylename=bold, text="Save"))
    paragraph.addText(" or visit ")
    paragraph.addElement(A(href=URL, text="our site"))
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="Footnote words"))
    note.addElement(body)
    paragraph.addElement(note)
    document.text.addElement(paragraph)
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    row = TableRow()
    for text in ("Left cell", "Right cell"):
        cell = TableCell()
        cell.addElement(P(text=text))
        row.addElement(cell)
    table.addElement(row)
    document.text.addElement(table)
    pictured = P(text="A picture")
    frame = Frame(width="1cm", height="1cm", anchortype="as-char")
    frame.addElement(Image(href=document.addPicture("Pictures/dot.png", "image/png", png())))
    pictured.addElement(frame)
    document.text.addElement(pictured)
    return saved(document)


def odf_texts(data: bytes) -> list[str]:
    """The text of each paragraph of an OpenDocument file, as odfpy reads it."""
    return [teletype.extractText(p) for p in load(io.BytesIO(data)).getElementsByType(P)]


def test_odt_paragraphs_tables_headers_and_footnotes_come_back_translated():
    data = text_file()
    out = translated(odf, data)
    document = load(io.BytesIO(out))
    texts = [teletype.extractText(p) for p in document.text.getElementsByType(P)]
    assert "FOOTNOTE WORDS" in texts and "LEFT CELL" in texts and "RIGHT CELL" in texts
    assert texts[0].startswith("PRESS SAVE OR VISIT OUR SITE")
    assert "A PICTURE" in texts
    headers = [teletype.extractText(p) for p in document.masterstyles.getElementsByType(P)]
    assert headers == ["HEADER WORDS"]


def test_odt_spans_and_links_keep_their_styles_around_their_own_words():
    out = translated(odf, text_file())
    document = load(io.BytesIO(out))
    spans = [
        (teletype.extractText(s), s.getAttribute("stylename"))
        for s in document.text.getElementsByType(Span)
    ]
    assert spans == [("SAVE", "Bold")]
    links = [
        (teletype.extractText(a), a.getAttribute("href"))
        for a in document.text.getElementsByType(A)
    ]
    assert links == [("OUR SITE", URL)]


def test_odt_pictures_styles_and_the_mimetype_stay_as_they_were():
    data = text_file()
    out = translated(odf, data)
    before, after = members(data), members(out)
    assert layout(out) == layout(data)
    assert layout(out)[0] == ("mimetype", zipfile.ZIP_STORED)
    changed = {n for n in before if after[n] != before[n]}
    assert changed == {"content.xml", "styles.xml"}
    assert after["Pictures/dot.png"] == png()


def slides_odp() -> bytes:
    """An .odp with one page: a text box and speaker notes."""
    document = OpenDocumentPresentation()
    page_layout = PageLayout(name="Page")
    document.automaticstyles.addElement(page_layout)
    master = MasterPage(name="Master", pagelayoutname=page_layout)
    document.masterstyles.addElement(master)
    page = Page(masterpagename=master)
    for parent, text in ((page, "Slide words"), (Notes(), "Speaker notes")):
        frame = Frame(width="10cm", height="2cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(P(text=text))
        frame.addElement(box)
        parent.addElement(frame)
        if parent is not page:
            page.addElement(parent)
    document.presentation.addElement(page)
    return saved(document)


def test_odp_slides_and_speaker_notes_come_back_translated():
    out = translated(odf, slides_odp())
    assert odf_texts(out) == ["SLIDE WORDS", "SPEAKER NOTES"]


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [ooxml, odf])
def test_a_corrupt_file_is_one_user_error(module):
    with pytest.raises(UserError, match="corrupt"):
        module.read(word_file()[:2000])
    with pytest.raises(UserError, match="corrupt"):
        module.read(b"this is not a zip at all")


def test_a_zip_bomb_is_refused_before_it_is_unpacked():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in members(word_file()).items():
            archive.writestr(name, body)
        archive.writestr("word/media/huge.bin", bytes(40_000_000))
    with pytest.raises(UserError, match="zip bomb"):
        ooxml.read(out.getvalue())


def test_a_small_file_of_very_repetitive_text_is_no_zip_bomb():
    # Deflate packs a repeated paragraph a thousand times: small files may unpack far beyond
    # the ratio, and are still read up to an absolute floor.
    paragraph = "<w:p><w:r><w:t>The same line, again.</w:t></w:r></w:p>"
    body = f"<w:document {WNS}><w:body>{paragraph * 10_000}</w:body></w:document>"
    data = zipped({"word/document.xml": body.encode()})
    assert len(body) > 200 * len(data)
    assert len(ooxml.read(data).segments) == 10_000


def test_an_encrypted_office_file_is_refused():
    # Word and PowerPoint encrypt a file into a CFB (OLE) container, not a zip.
    cfb = zipdoc.CFB_MAGIC + bytes(4088)
    with pytest.raises(UserError, match="encrypted"):
        ooxml.read(cfb)


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE w:document [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;">]>',
        '<!DOCTYPE w:document [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    ],
)
def test_xml_with_a_doctype_or_entities_is_refused(doctype):
    parts = members(word_file())
    body = parts["word/document.xml"].decode()
    declaration, rest = body.split("?>", 1)
    parts["word/document.xml"] = f"{declaration}?>{doctype}{rest}".encode()
    with pytest.raises(UserError, match="DOCTYPE"):
        ooxml.read(zipped(parts))


def test_a_zip_that_is_no_office_document_is_refused_by_name():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(UserError, match="not a .docx or .pptx"):
        ooxml.read(out.getvalue())
    with pytest.raises(UserError, match="not an .odt or .odp"):
        odf.read(out.getvalue())


def test_runs_split_only_by_language_or_spelling_marks_make_no_tags():
    document = WordDocument()
    paragraph = document.add_paragraph()
    for text, extra in (
        ("Spell ", ""),
        ("chekc", '<w:lang w:val="en-GB"/><w:noProof/>'),
        (" done", ""),
    ):
        paragraph._p.append(
            parse_xml(
                f'<w:r {WNS}><w:rPr>{extra}</w:rPr><w:t xml:space="preserve">{text}</w:t></w:r>'
            )
        )
    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    line = slide.shapes.add_textbox(0, 0, Inches(4), Inches(1)).text_frame.paragraphs[0]
    for text, spelling in (("Spell ", None), ("chekc", "1"), (" done", None)):
        run = line.add_run()
        run.text = text
        run.font.language_id = 1033  # lang="en-US"
        if spelling:
            run._r.get_or_add_rPr().set("err", spelling)
    assert ooxml.read(saved(document)).segments == ["Spell chekc done"]
    assert ooxml.read(saved(presentation)).segments == ["Spell chekc done"]


def test_docx_content_controls_are_translated_inside_their_control():
    document = WordDocument()
    paragraph = document.add_paragraph("Name: ")
    paragraph._p.append(
        parse_xml(
            f'<w:sdt {WNS}><w:sdtPr><w:alias w:val="Client"/><w:tag w:val="client"/></w:sdtPr>'
            "<w:sdtContent><w:r><w:t>Click here to enter text</w:t></w:r></w:sdtContent>"
            "</w:sdt>"
        )
    )
    out = translated(ooxml, saved(document))
    root = etree.fromstring(members(out)["word/document.xml"])
    (control,) = root.iter(f"{{{W}}}sdt")
    assert control.find(f"{{{W}}}sdtPr/{{{W}}}tag").get(f"{{{W}}}val") == "client"
    content = control.find(f"{{{W}}}sdtContent")
    assert "".join(content.itertext()) == "CLICK HERE TO ENTER TEXT"
    assert word_texts(out, "word/document.xml") == ["NAME: CLICK HERE TO ENTER TEXT"]


def test_an_encrypted_opendocument_file_is_refused():
    parts = members(text_file())
    manifest = parts["META-INF/manifest.xml"].decode()
    parts["META-INF/manifest.xml"] = manifest.replace(
        "</manifest:manifest>", "<manifest:encryption-data/></manifest:manifest>"
    ).encode()
    with pytest.raises(UserError, match="encrypted"):
        odf.read(zipped(parts))


@pytest.mark.parametrize(
    "module, build", [(ooxml, word_file), (ooxml, slides_file), (odf, text_file)]
)
def test_every_segment_is_markup_the_tag_machinery_reads(module, build):
    for segment in module.read(build()).segments:
        marked = parse(segment, "xml")
        assert marked.words


def test_what_stands_before_or_after_all_the_text_stays_there_out_of_the_segment():
    data = word_file()
    segments = ooxml.read(data).segments
    assert " Footnote words" in segments  # the footnote's number mark stays first
    assert "A claim" in segments  # comment marks and the footnote reference stay last
    notes = etree.fromstring(members(translated(ooxml, data))["word/footnotes.xml"])
    first = next(r for r in notes.iter(f"{{{W}}}r") if r.find(f"{{{W}}}footnoteRef") is not None)
    assert first.getnext().findtext(f"{{{W}}}t") == " FOOTNOTE WORDS"


def through_the_tag_machinery(segment: str) -> str:
    """A segment as the translation path returns it: tags out, words upper-cased one for one,
    tags put back by the word alignment."""
    marked = parse(segment, "xml")
    words = [w.upper() for w in marked.words]
    return reinsert(marked, " ".join(words), [(i, i) for i in range(len(words))])


def test_formatting_survives_the_tag_machinery_itself():
    document = ooxml.read(word_file())
    out = document.rebuild([through_the_tag_machinery(s) for s in document.segments])
    paragraph = WordDocument(io.BytesIO(out)).paragraphs[1]
    assert paragraph.text == "PRESS SAVE AND THEN WAIT OR VISIT OUR SITE"
    assert [r.text for r in paragraph.runs if r.bold] == ["SAVE"]
    assert [r.text for r in paragraph.runs if r.italic] == ["WAIT"]
    assert [(link.text, link.address) for link in paragraph.hyperlinks] == [("OUR SITE", URL)]
    document = odf.read(text_file())
    out = document.rebuild([through_the_tag_machinery(s) for s in document.segments])
    spans = load(io.BytesIO(out)).text.getElementsByType(Span)
    assert [(teletype.extractText(s), s.getAttribute("stylename")) for s in spans] == [
        ("SAVE", "Bold")
    ]


@pytest.mark.parametrize("offset", [5, 40])
def test_a_picture_damaged_inside_the_zip_is_refused_when_read(offset):
    data = bytearray(word_file())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = next(i for i in archive.infolist() if i.filename.startswith("word/media/"))
    # The part's data starts after its local header: 30 bytes, its name and its extra field.
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    at = info.header_offset + 30 + name_length + extra_length + offset
    data[at] ^= 0xFF
    with pytest.raises(UserError, match="corrupt"):
        ooxml.read(bytes(data))


def test_spaces_tabs_and_line_breaks_are_kept_in_every_format():
    document = OpenDocumentText()
    paragraph = P()
    teletype.addTextToElement(paragraph, "One  two\tthree")  # as text:s and text:tab
    document.text.addElement(paragraph)
    out = translated(odf, saved(document))
    assert odf_texts(out) == ["ONE  TWO\tTHREE"]
    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    box = slide.shapes.add_textbox(0, 0, Inches(4), Inches(1))
    box.text_frame.text = "First line\vsecond line"
    out = translated(ooxml, saved(presentation))
    shape = Presentation(io.BytesIO(out)).slides[0].shapes[0]
    assert shape.text_frame.text == "FIRST LINE\vSECOND LINE"
    word = WordDocument()
    word.add_paragraph("Left\tright").add_run().add_break()
    word.paragraphs[0].add_run("below")
    out = translated(ooxml, saved(word))
    assert WordDocument(io.BytesIO(out)).paragraphs[0].text == "LEFT\tRIGHT\nBELOW"


@pytest.mark.parametrize(
    "name, fmt", [("a.docx", "docx"), ("b.PPTX", "pptx"), ("c.odt", "odt"), ("d.odp", "odp")]
)
def test_office_formats_are_known_by_their_extension(name, fmt):
    assert format_of(Path(name)) == fmt
    assert reader(fmt) in (ooxml.read, odf.read)


@pytest.fixture(scope="module")
def files() -> tuple[bytes, bytes]:
    """A .docx and an .odt, built once for the fuzzed translations."""
    return word_file(), text_file()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["<r2>", "</r2>", "<a1>", "</a1>", "<x1/>", "<x2/>", "<r9>", "</x1>"]),
            st.text(max_size=8),
        ),
        max_size=12,
    )
)
def test_any_translation_rebuilds_a_file_that_opens(files, pieces):
    # Whatever comes back (tags lost, repeated, crossed, unknown; control characters), the
    # file is rebuilt and opens.
    translation = "".join(pieces)
    document = ooxml.read(files[0])
    out = document.rebuild([translation] * len(document.segments))
    WordDocument(io.BytesIO(out))
    document = odf.read(files[1])
    load(io.BytesIO(document.rebuild([translation] * len(document.segments))))


def test_space_at_either_end_of_a_paragraph_outlives_a_translation_that_trims_it():
    # Word writes a space between a footnote's number and its text; translations come back
    # trimmed.
    document = ooxml.read(word_file())
    out = document.rebuild([through_the_tag_machinery(s) for s in document.segments])
    assert word_texts(out, "word/footnotes.xml") == ["", " FOOTNOTE WORDS"]
    assert "BEFORE THE BOX " in [p.text for p in WordDocument(io.BytesIO(out)).paragraphs]
