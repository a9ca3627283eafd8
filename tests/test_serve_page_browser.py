"""The page at `/` in a real browser (issue 54, item 3): headless Chromium, driven by selenium,
against a server with keys on loopback. The file tab sends a .txt and a .docx to
LibreTranslate's /translate_file with the key typed in, and the translated file downloads by
itself, every paragraph translated; the text tab still translates sentence by sentence.
Skips with its reason without Chromium, chromedriver (Debian's `chromium`, `chromium-driver`;
.ci/run installs them) or selenium (the dev extra).

`PAGE_SCREENSHOT=docs/img/page-file-tab.png pytest tests/test_serve_page_browser.py` also
saves the file tab, as docs/serving.md shows it."""

from __future__ import annotations

import io
import os
import shutil
import time
from pathlib import Path

import pytest
from docx import Document as WordDocument

from tests.factories import untrained_run
from tests.servers import LoopbackServer

pytest.importorskip("uvicorn", reason="the serve extra is not installed")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra) is absent")

pytestmark = pytest.mark.slow

KEY = "page-key"
TEXT = "I have two cats.\n\nThe house is big.\n\nIt is five.\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory, demo_pairs):
    from seq2seq.decode.translator import load_translator
    from seq2seq.serve.app import ServeConfig, create_app, run_info

    folder = tmp_path_factory.mktemp("page-browser")
    run = untrained_run(tmp_path_factory.mktemp("page-run"), demo_pairs[:300])
    (folder / "keys.txt").write_text(f"{KEY}\n")
    config = ServeConfig(api_keys=folder / "keys.txt", state_dir=folder / "state")
    translator, checkpoint = load_translator(run, device="cpu")
    info = run_info(run, checkpoint, translator, config)
    s = LoopbackServer(create_app(translator, info, config))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("chromium or chromedriver is not installed (Debian: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)  # no sandbox: CI runs as root
    options.add_argument("--window-size=1000,520")
    b = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    b.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    yield b
    b.quit()


def _wait(until, timeout: float = 90):
    """`until()`'s first true value, polled."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = until()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout} s in vain")


def _open(browser, server):
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#target option"))
    key = browser.find_element(By.ID, "key")
    assert key.is_displayed()  # the server has keys: the page asks for one
    key.send_keys(KEY)
    return lambda id: browser.find_element(By.ID, id)


def _translate_file(browser, server, downloads: Path, path: Path) -> bytes:
    """The file put in the file tab, translated, and the file the browser downloaded."""
    find = _open(browser, server)
    find("tab-file").click()
    assert find("file-panel").is_displayed() and not find("text-panel").is_displayed()
    assert path.suffix in find("file").get_attribute("accept").split(",")
    find("file").send_keys(str(path))
    find("translate-file").click()
    link = _wait(lambda: find("download").is_displayed() and find("download"))
    assert find("file-error").text == ""
    name = f"{path.stem}.fr{path.suffix}"
    assert link.get_attribute("download") == name and name in link.text
    saved = downloads / name
    _wait(lambda: saved.exists() and not list(downloads.glob("*.crdownload")))
    if os.environ.get("PAGE_SCREENSHOT"):
        browser.save_screenshot(os.environ["PAGE_SCREENSHOT"])
    return saved.read_bytes()


def test_the_file_tab_translates_a_text_file_and_downloads_it(browser, server, downloads):
    path = downloads.parent / "notes.txt"
    path.write_text(TEXT)
    out = _translate_file(browser, server, downloads, path).decode()
    paragraphs = [p.strip() for p in out.strip().split("\n\n")]
    assert len(paragraphs) == 3 and all(paragraphs)
    assert not set(paragraphs) & {p.strip() for p in TEXT.split("\n\n")}  # each translated


def test_the_file_tab_translates_a_word_document(browser, server, downloads):
    """Where an untrained model puts the bold run's tag is its own affair: the runs' formatting
    is the document tests' (test_office_documents.py)."""
    document = WordDocument()
    for text in ("I have two cats.", "The house is big."):  # words the tiny model can spell
        document.add_paragraph(text).add_run(" You want one blue chair.").bold = True
    path = downloads.parent / "report.docx"
    document.save(path)
    out = WordDocument(io.BytesIO(_translate_file(browser, server, downloads, path)))
    paragraphs = out.paragraphs
    assert len(paragraphs) == 2 and all(p.text for p in paragraphs)
    assert not {p.text for p in paragraphs} & {p.text for p in document.paragraphs}


def test_the_text_tab_still_translates_each_sentence(browser, server):
    from selenium.webdriver.common.by import By

    find = _open(browser, server)
    find("text").send_keys("I have three cats. It is five.")
    find("translate").click()
    rows = _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#result tbody tr"))
    cells = [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert [c[0] for c in cells] == ["I have three cats.", "It is five."]
    assert all(c[1] and c[2].endswith("%") for c in cells) and find("error").text == ""
