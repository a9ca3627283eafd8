"""A 50-page Word document through `translate-file`, beside the same segments as plain text
(issue 54).

    python scripts/bench_files.py --run /work/bench/s11/enfr-small \\
        --data /work/shared/data/enfr --align-work /work/bench/s11/align --pages 50

The document is built with python-docx from the enfr valid lines (then train lines): each page
holds PARAGRAPHS paragraphs, one line each, with a bold word, an italic word and, every LINK_EVERY
paragraph, a link around a few words, then a table of TABLE_CELLS lines and a page break; the
section has a header and a footer line. It is translated as `seq2seq translate-file` does
(`document.translate.translate_document`, the run's decoding settings), and its different
segments, markup taken out, as plain text through `Translator.translate`: each in a child
process of its own, timed after the model is loaded and warmed up, its peak RSS read from
`os.wait4`, the two alternated `--repeats` times. Reported: segments/s of each (the median run),
their ratio (target ≥ 0.8) and each pair's, both peak RSS, and where the bold formatting landed.

Tag placement, with `--align-work` (the folder of `bench_alignment.py reference`, whose
`reference.inter` holds eflomal's links of the valid split, then of the train split): the bold
word of a paragraph is one that eflomal aligns one-to-one with a reference word, and, as in
`bench_alignment.py tags`, the formatting is in the right place when the translated paragraph's
bold words include that reference word, counted over the paragraphs where the word appears
exactly once. Without `--align-work` the bold words are chosen at random and only the
formatting's survival is reported (every bold, italic and link run present in the output).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_alignment import norm, one_to_one_words, parse_links, read  # noqa: E402

PARAGRAPHS = 30  # body paragraphs a page: with the table, about 400 words, a printed page
TABLE_CELLS = 4  # lines in each page's 2 × 2 table
LINK_EVERY = 4  # a link in every 4th paragraph
LINK_URL = "https://example.com/docs"
WARMUP = 16  # segments translated before the clock starts
HYPERLINK = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink"
W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def source_lines(data: Path, align_work: Path | None, needed: int) -> list[dict]:
    """`needed` lines (valid, then train) with their reference and, where eflomal's links are
    there, the source words that have one right reference word."""
    en = read(data / "valid.en") + read(data / "train.en")[:needed]
    fr = read(data / "valid.fr") + read(data / "train.fr")[:needed]
    inter = read(align_work / "reference.inter") if align_work is not None else []
    lines = []
    for k, (src, ref) in enumerate(zip(en, fr)):
        if len(lines) == needed:
            break
        words = src.split()
        if len(words) < 3:
            continue
        links = parse_links(inter[k]) if k < len(inter) else set()
        pairs = one_to_one_words(words, ref.split(), links)
        lines.append({"src": src, "ref": ref, "one_to_one": pairs})
    return lines


def page_plan(lines: list[dict], pages: int, seed: int = 54) -> list[dict]:
    """Each line's place and formatting: body paragraphs (bold, italic, link word ranges, the
    reference word expected under the bold) and table cells, page by page."""
    rng, plan, at = random.Random(seed), [], 0
    for page in range(pages):
        for n in range(PARAGRAPHS + TABLE_CELLS):
            line = lines[at % len(lines)]
            at += 1
            if n >= PARAGRAPHS:
                plan.append({"src": line["src"], "where": "cell", "page": page})
                continue
            words = line["src"].split()
            if line["one_to_one"]:
                bold, ref_word = rng.choice(line["one_to_one"])
                expect = norm(line["ref"].split()[ref_word])
            else:
                bold, expect = rng.randrange(len(words)), None
            others = [i for i in range(len(words)) if i != bold]
            italic = rng.choice(others)
            link = None
            if n % LINK_EVERY == LINK_EVERY - 1:
                free = [i for i in others if i != italic]
                start = rng.choice(free)
                end = start
                while end + 1 in free and end + 1 - start < 2:  # up to three words
                    end += 1
                link = (start, end)
            plan.append(
                {
                    "src": line["src"],
                    "where": "body",
                    "page": page,
                    "bold": bold,
                    "italic": italic,
                    "link": link,
                    "expect": expect,
                }
            )
    return plan


def build_docx(plan: list[dict], header: str, footer: str) -> bytes:
    """The planned document, written with python-docx."""
    from docx import Document  # the benchmark's own writer, as people make such files

    document = Document()
    section = document.sections[0]
    section.header.paragraphs[0].text = header
    section.footer.paragraphs[0].text = footer
    cells: list[str] = []
    for item in plan:
        if item["where"] == "cell":
            cells.append(item["src"])
            if len(cells) == TABLE_CELLS:
                table = document.add_table(rows=2, cols=2)
                for cell, text in zip((c for row in table.rows for c in row.cells), cells):
                    cell.paragraphs[0].text = text
                cells = []
                document.add_page_break()
            continue
        _formatted_paragraph(document, item)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _formatted_paragraph(document, item: dict) -> None:
    """A paragraph of the item's words: its bold and italic words in runs of their own, its
    link's words inside a `w:hyperlink`."""
    from docx.oxml import parse_xml

    paragraph = document.add_paragraph()
    words = item["src"].split()
    link = item["link"] or (-1, -1)
    k = 0
    while k < len(words):
        space = " " if k + 1 < len(words) else ""
        if k == link[0]:
            text = " ".join(words[link[0] : link[1] + 1])
            rid = paragraph.part.relate_to(LINK_URL, HYPERLINK, is_external=True)
            run = f'<w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr><w:t>{_xml(text)}</w:t></w:r>'
            names = f'xmlns:w="{W_NS}" xmlns:r="{R_NS}"'
            paragraph._p.append(parse_xml(f'<w:hyperlink {names} r:id="{rid}">{run}</w:hyperlink>'))
            k = link[1] + 1
            paragraph.add_run(" " if k < len(words) else "")
            continue
        run = paragraph.add_run(words[k])
        run.bold = k == item["bold"] or None
        run.italic = k == item["italic"] or None
        paragraph.add_run(space)
        k += 1


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bold_words(paragraph) -> tuple[list[str], list[bool]]:
    """A paragraph's whitespace words (as `norm` makes them) and whether each is bold (any of
    its letters in a bold run)."""
    chars: list[tuple[str, bool]] = []
    for inner in paragraph.iter_inner_content():  # runs, and links with runs of their own
        for run in getattr(inner, "runs", [inner]):
            chars += [(c, bool(run.bold)) for c in run.text]
    text = "".join(c for c, _ in chars)
    words, bold = [], []
    for m in re.finditer(r"\S+", text):
        words.append(norm(m.group()))
        bold.append(any(b for _, b in chars[m.start() : m.end()]))
    return words, bold


def placement(translated: bytes, plan: list[dict]) -> dict:
    """Where the bold formatting landed in the translated document: right-word rate over the
    body paragraphs whose expected reference word appears once, exact (only it bold), and the
    formatting kept (bold, italic and link runs present in every body paragraph)."""
    from docx import Document

    body = [item for item in plan if item["where"] == "body"]
    paragraphs = [p for p in Document(io.BytesIO(translated)).paragraphs if p.text.strip()]
    assert len(paragraphs) == len(body), (len(paragraphs), len(body))
    right = exact = checkable = kept = bold_total = 0
    for item, paragraph in zip(body, paragraphs):
        words, bold = bold_words(paragraph)
        has_link = bool(paragraph.hyperlinks) or item["link"] is None
        has_italic = any(r.italic for r in paragraph.runs)
        kept += any(bold) and has_italic and has_link
        if item["expect"] is None or words.count(item["expect"]) != 1:
            continue
        checkable += 1
        at = words.index(item["expect"])
        right += bold[at]
        exact += bold[at] and sum(bold) == 1
        bold_total += sum(bold)
    return {
        "body_paragraphs": len(body),
        "formatting_kept": kept / max(len(body), 1),
        "checkable": checkable,
        "right_word": right / max(checkable, 1) if checkable else None,
        "exact_word": exact / max(checkable, 1) if checkable else None,
        "mean_bold_words": bold_total / max(checkable, 1) if checkable else None,
    }


def child(args) -> None:
    """In a process of its own: load the run, warm up, time one way of translating, print JSON."""
    import torch

    from seq2seq.cli.base import decode_settings
    from seq2seq.decode.markup import parse
    from seq2seq.decode.translator import load_translator
    from seq2seq.document.formats import reader
    from seq2seq.document.translate import translate_document

    torch.set_num_threads(args.threads)
    translator, _ = load_translator(args.run, device="cpu", decode=decode_settings(args.run))
    data = args.docx.read_bytes()
    segments = reader("docx")(data).segments
    # The different segments with words, as translate_document picks them, markup taken out.
    plain = [parse(s, "xml").text for s in dict.fromkeys(segments)]
    texts = [t for t in plain if any(c.isalpha() for c in t)]
    translator.translate(texts[:WARMUP])
    start = time.perf_counter()
    if args.child == "document":
        translated, report = translate_document(translator, data, "docx")
        seconds = time.perf_counter() - start
        (args.work / "translated.docx").write_bytes(translated)
        kept = report.kept
    else:
        translator.translate(texts)
        seconds, kept = time.perf_counter() - start, {}
    print(json.dumps({"segments": len(texts), "seconds": seconds, "kept": kept}))


def measured(args, way: str) -> dict:
    """One child's figures and its peak RSS (MB)."""
    cmd = [sys.executable, __file__, "--child", way, "--run", str(args.run)]
    cmd += ["--work", str(args.work), "--docx", str(args.docx), "--threads", str(args.threads)]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"the {way} child failed (status {status})")
    found = json.loads(out.strip().splitlines()[-1])
    found["segments_per_s"] = found["segments"] / found["seconds"]
    found["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: kB
    return found


def median_run(found: list[dict]) -> dict:
    """The run of median seconds (the higher middle one of an even count)."""
    return sorted(found, key=lambda f: f["seconds"])[len(found) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    parser.add_argument("--align-work", type=Path, default=None)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="each way, alternated; medians")
    parser.add_argument("--work", type=Path, default=Path("/tmp/filesbench"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "bench_files.json")
    parser.add_argument("--child", choices=["document", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--docx", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    lines = source_lines(args.data, args.align_work, args.pages * (PARAGRAPHS + TABLE_CELLS) + 2)
    plan = page_plan(lines[2:], args.pages)
    args.docx = args.work / "bench.docx"
    args.docx.write_bytes(build_docx(plan, lines[0]["src"], lines[1]["src"]))
    # Alternated, each way's median kept: this VM's speed drifts by 20% from minute to minute.
    ways = ("document", "plain")
    runs = [{way: measured(args, way) for way in ways} for _ in range(args.repeats)]
    document, plain = (median_run([r[way] for r in runs]) for way in ways)
    result = {
        "pages": args.pages,
        "threads": args.threads,
        "repeats": args.repeats,
        "document": document,
        "plain": plain,
        "ratio": document["segments_per_s"] / plain["segments_per_s"],
        "ratios": [r["document"]["segments_per_s"] / r["plain"]["segments_per_s"] for r in runs],
        "tags": placement((args.work / "translated.docx").read_bytes(), plan),
        "tags_reference": "eflomal one-to-one links" if args.align_work else "none (kept only)",
    }
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
