"""scripts/bench_files.py: the Word document it builds, where its bold formatting is judged to
land, and the whole benchmark on a tiny model with one page."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from docx import Document

from tests.factories import untrained_run

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bench_files.py"
_SPEC = importlib.util.spec_from_file_location("bench_files", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

LINES = [
    {"src": f"Press button number {k} to save the file.", "ref": "", "one_to_one": []}
    for k in range(40)
]


def _untranslated_plan(pages: int) -> list[dict]:
    """A plan whose expected word is the bold source word itself: right for the document as it
    was written."""
    plan = bench.page_plan(LINES, pages)
    for item in plan:
        if item["where"] == "body":
            item["expect"] = bench.norm(item["src"].split()[item["bold"]])
    return plan


def test_the_document_has_its_pages_paragraphs_tables_links_header_and_footer():
    plan = bench.page_plan(LINES, 2)
    document = Document(io.BytesIO(bench.build_docx(plan, "The header.", "The footer.")))
    body = [p for p in document.paragraphs if p.text.strip()]
    assert len(body) == 2 * bench.PARAGRAPHS
    assert [p.text for p in body] == [i["src"] for i in plan if i["where"] == "body"]
    assert len(document.tables) == 2
    assert document.tables[0].cell(0, 0).text == plan[bench.PARAGRAPHS]["src"]
    assert document.sections[0].header.paragraphs[0].text == "The header."
    assert document.sections[0].footer.paragraphs[0].text == "The footer."
    links = sum(len(p.hyperlinks) for p in body)
    assert links == 2 * (bench.PARAGRAPHS // bench.LINK_EVERY)
    words, bold = bench.bold_words(body[0])
    expected = bench.norm(plan[0]["src"].split()[plan[0]["bold"]])
    assert [w for w, b in zip(words, bold) if b] == [expected]


def test_bold_words_where_they_were_written_are_all_in_the_right_place():
    plan = _untranslated_plan(1)
    found = bench.placement(bench.build_docx(plan, "h", "f"), plan)
    assert found["checkable"] == bench.PARAGRAPHS
    assert found["right_word"] == found["exact_word"] == found["formatting_kept"] == 1.0
    assert found["mean_bold_words"] == 1.0


def test_bold_formatting_around_another_word_is_counted_wrong_and_a_missing_word_not_at_all():
    plan = _untranslated_plan(1)
    for item in plan[:10]:
        item["expect"] = bench.norm(item["src"].split()[item["italic"]])
    plan[10]["expect"] = "fichier"  # not in the output: the test cannot tell
    found = bench.placement(bench.build_docx(plan, "h", "f"), plan)
    assert found["checkable"] == bench.PARAGRAPHS - 1
    assert found["right_word"] == pytest.approx((bench.PARAGRAPHS - 11) / (bench.PARAGRAPHS - 1))


def test_eflomal_one_to_one_links_choose_the_bold_word_and_its_reference_word(tmp_path):
    pairs = [("Save the file now", "Enregistrez le fichier maintenant")] * 3
    for split in ("valid", "train"):
        (tmp_path / f"{split}.en").write_text("".join(a + "\n" for a, _ in pairs))
        (tmp_path / f"{split}.fr").write_text("".join(b + "\n" for _, b in pairs))
    # "the" is aligned to two words: not one-to-one; "now" has no link.
    (tmp_path / "reference.inter").write_text("0-0 1-1 1-0 2-2\n" * 3)
    lines = bench.source_lines(tmp_path, tmp_path, 2)
    assert [line["one_to_one"] for line in lines] == [[(2, 2)], [(2, 2)]]
    plan = bench.page_plan(lines, 1)
    assert {(i["bold"], i["expect"]) for i in plan if i["where"] == "body"} == {(2, "fichier")}


@pytest.mark.slow
def test_the_benchmark_runs_on_a_tiny_model_with_one_page(tmp_path, demo_pairs):
    (tmp_path / "model").mkdir()
    run = untrained_run(tmp_path / "model", demo_pairs[:300])
    data = tmp_path / "data"
    data.mkdir()
    pairs = [(a, b) for a, b in demo_pairs if len(a.split()) >= 3][:60]
    for split in ("valid", "train"):
        (data / f"{split}.en").write_text("".join(a + "\n" for a, _ in pairs))
        (data / f"{split}.fr").write_text("".join(b + "\n" for _, b in pairs))
    (data / "reference.inter").write_text("0-0 1-1 2-2\n" * len(pairs))
    out = tmp_path / "files.json"
    cmd = [sys.executable, str(_PATH), "--run", str(run), "--data", str(data), "--pages", "1"]
    cmd += ["--align-work", str(data), "--work", str(tmp_path / "work"), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    found = json.loads(out.read_text())
    segments = bench.PARAGRAPHS + bench.TABLE_CELLS + 2  # with the header and the footer
    assert found["document"]["segments"] == found["plain"]["segments"] <= segments
    assert found["ratio"] > 0 and found["document"]["peak_rss_mb"] > 50
    assert found["tags"]["body_paragraphs"] == bench.PARAGRAPHS
    assert 0 <= found["tags"]["formatting_kept"] <= 1
    Document(str(tmp_path / "work" / "translated.docx"))  # opens in the library that wrote it
