"""Documents over the server's APIs (issue 54, item 2): LibreTranslate's POST /translate_file
and GET /download_file, DeepL's /v2/document with its status and result, each with keys and
character limits counting the document's characters, an upload size limit, bad files refused in
each API's shape, and translated files forgotten after their time."""

from __future__ import annotations

import io
import time

import pytest
from docx import Document as WordDocument

from seq2seq.serve.documents import (
    DONE,
    DocumentLimits,
    DocumentStore,
    extensions,
    read_upload,
    safe_name,
)
from seq2seq.serve.schema import RequestError
from tests.factories import untrained_run
from tests.servers import LoopbackServer

KEY, METERED = "doc-key", "metered-key"
KEYS_FILE = f"{KEY}\n{METERED} characters=30\n"
TEXT = b"I have two cats.\n\nThe house is big.\n"


def _docx(*paragraphs: str) -> bytes:
    document = WordDocument()
    for text in paragraphs:
        p = document.add_paragraph(text)
        p.add_run(" bold words.").bold = True
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# Reading an upload


def test_the_supported_formats_are_listed_with_their_leading_dot():
    found = extensions()
    assert {".txt", ".md", ".html", ".srt", ".po", ".xliff", ".docx", ".odt"} <= set(found)
    assert all(ext.startswith(".") for ext in found) and ".pdf" not in found


@pytest.mark.parametrize("name", ["report.pdf", "sheet.xlsx", "archive.bin", "noextension"])
def test_a_format_not_translated_is_a_415_naming_the_supported_ones(name):
    with pytest.raises(RequestError) as e:
        read_upload(name, b"%PDF-1.4", DocumentLimits())
    assert e.value.status == 415 and ".docx" in e.value.message


def test_an_upload_over_the_size_limit_is_a_413():
    with pytest.raises(RequestError) as e:
        read_upload("a.txt", b"x" * 2049, DocumentLimits(max_upload_bytes=2048))
    assert e.value.status == 413 and "upload limit" in e.value.message


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("broken.docx", b"PK\x03\x04 not a zip at all"),
        ("entities.xliff", b'<!DOCTYPE x [<!ENTITY a "aaaa">]><xliff>&a;</xliff>'),
    ],
)
def test_a_corrupt_or_hostile_file_is_a_400(name, data):
    with pytest.raises(RequestError) as e:
        read_upload(name, data, DocumentLimits())
    assert e.value.status == 400


def test_a_zip_bomb_or_an_encrypted_office_file_is_a_400_before_it_is_unpacked():
    import zipfile

    from seq2seq.document.zipdoc import CFB_MAGIC

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(_docx("A cat.")), "r") as docx:
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
            for info in docx.infolist():
                bomb.writestr(info.filename, docx.read(info.filename))
            bomb.writestr("word/media/huge.bin", bytes(40_000_000))
    for data in (out.getvalue(), CFB_MAGIC + bytes(4088)):
        with pytest.raises(RequestError) as e:
            read_upload("a.docx", data, DocumentLimits())
        assert e.value.status == 400


def test_an_upload_is_charged_the_characters_of_its_different_segments_markup_aside():
    read = read_upload("a.docx", _docx("One cat.", "One cat."), DocumentLimits())
    assert read.fmt == "docx" and len(read.texts) == 1
    assert read.characters == len("One cat. bold words.")


def test_a_client_file_name_becomes_one_harmless_path_component():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\docs\\my report (1).docx") == "my_report__1_.docx"
    assert safe_name(".hidden.txt") == "hidden.txt"
    assert safe_name("x" * 300 + ".docx").endswith(".docx")


def test_a_done_document_is_forgotten_and_its_file_removed_after_its_time(tmp_path):
    now = [0.0]
    refunds = []
    store = DocumentStore(
        tmp_path, DocumentLimits(ttl_s=60), lambda k, n: refunds.append(n), lambda: now[0]
    )
    read = read_upload("a.txt", TEXT, DocumentLimits())
    job = store.submit(read, TEXT, "a.txt", None, lambda job, data: data.upper())
    job.future.result(10)
    assert job.status == DONE and store.find(job.id, job.key) is job
    assert store.result(job) == TEXT.upper() and store.find(job.id, "wrong") is None
    now[0] = 61.0
    assert store.find(job.id, job.key) is None and store.named(job.name) is None
    assert not job.result.exists()
    store.close()
    assert not store.root.exists() and refunds == []


def test_a_failed_document_gives_its_characters_back_and_says_why(tmp_path):
    refunds = []
    store = DocumentStore(None, DocumentLimits(), lambda k, n: refunds.append((k, n)))
    read = read_upload("a.txt", TEXT, DocumentLimits())

    def fail(job, data):
        raise RuntimeError("boom")

    job = store.submit(read, TEXT, "a.txt", "k", fail).future.result(10)
    assert job.status == "error" and job.error == "translation failed"
    assert refunds == [("k", read.characters)] and job.result is None
    store.close()


def test_document_segments_are_decoded_through_the_batcher_as_the_document_group(
    tmp_path, demo_pairs
):
    from types import SimpleNamespace

    from seq2seq.config import DecodeConfig
    from seq2seq.serve.batcher import Batcher
    from seq2seq.serve.documents import Languages, decoder
    from seq2seq.serve.schema import RequestLimits
    from tests.factories import tiny_translator

    translator = tiny_translator(tmp_path, demo_pairs[:200], DecodeConfig(beam_size=1))
    groups = []
    batcher = Batcher(
        lambda lines, options, wanted: [[(f"T{len(s.segments)}", 0.0)] for s in lines],
        on_batch=lambda report: groups.append(report.group),
    ).start()
    engine = SimpleNamespace(
        translator=translator, limits=RequestLimits(), state=SimpleNamespace(batcher=batcher)
    )
    store = DocumentStore(tmp_path, DocumentLimits(), lambda k, n: None)
    translate = decoder(engine, Languages(), lambda: False)
    read = read_upload("a.txt", TEXT, DocumentLimits())
    job = store.submit(read, TEXT, "a.txt", None, translate).future.result(30)
    assert job.status == DONE and store.result(job) == b"T1\n\nT1\n"
    assert groups and set(groups) == {"document"} and job.done == 2
    store.close()
    batcher.stop()


# A server


uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    return untrained_run(tmp_path_factory.mktemp("documents-run"), demo_pairs[:300])


def _start(run, tmp_path, **cfg) -> LoopbackServer:
    from seq2seq.decode.translator import load_translator
    from seq2seq.serve.app import ServeConfig, create_app, run_info

    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS_FILE)
    config = ServeConfig(api_keys=keys, state_dir=tmp_path / "state", **cfg)
    translator, checkpoint = load_translator(run, device="cpu")
    return LoopbackServer(
        create_app(translator, run_info(run, checkpoint, translator, config), config)
    )


@pytest.fixture(scope="module")
def server(run, tmp_path_factory):
    limits = DocumentLimits(max_upload_bytes=64 * 1024)
    s = _start(run, tmp_path_factory.mktemp("documents-server"), documents=limits)
    yield s
    s.stop()


def _lt_file(client, name: str, data: bytes, key: str | None = KEY, **fields):
    form = {"source": "en", "target": "fr", **fields}
    if key is not None:
        form["api_key"] = key
    return client.post("/translate_file", data=form, files={"file": (name, data)})


@pytest.mark.slow
def test_libretranslate_translates_a_file_sent_as_its_page_sends_it(server):
    settings = server.client.get("/frontend/settings").json()
    assert settings["filesTranslation"] is True and ".docx" in settings["supportedFilesFormat"]
    answer = _lt_file(server.client, "notes.docx", _docx("I have two cats.", "It is big."))
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith(server.url + "/download_file/") and url.endswith(".notes.docx")
    got = server.client.get(url)
    assert got.status_code == 200
    assert 'filename="notes.docx"' in got.headers["content-disposition"]
    paragraphs = WordDocument(io.BytesIO(got.content)).paragraphs
    sources = ["I have two cats. bold words.", "It is big. bold words."]
    assert [p.text for p in paragraphs] != sources and all(p.text for p in paragraphs)
    # Formatting travels as tags (each run's kept: test_office_documents); where an untrained
    # model puts them varies, so here only that bold text is still there.
    assert any(r.bold for p in paragraphs for r in p.runs)
    assert server.client.get("/download_file/nope.notes.docx").status_code == 404


@pytest.mark.slow
def test_libretranslate_refuses_bad_files_in_its_own_shape(server):
    c = server.client
    wrong = _lt_file(c, "a.txt", TEXT, key="nope")
    assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
    assert _lt_file(c, "a.txt", TEXT, key=None).status_code == 403
    pdf = _lt_file(c, "a.pdf", b"%PDF-1.4")
    assert pdf.status_code == 400
    assert "file format not supported" in pdf.json()["error"] and ".docx" in pdf.json()["error"]
    big = _lt_file(c, "a.txt", b"cats " * 20_000)
    assert big.status_code == 413 and "error" in big.json()
    corrupt = _lt_file(c, "a.docx", b"PK\x03\x04 broken")
    assert corrupt.status_code == 400 and corrupt.json()["error"].startswith("Invalid request")
    over = _lt_file(c, "a.txt", TEXT, key=METERED)  # 34 characters, the key has 30
    assert over.status_code == 429 and "character limit" in over.json()["error"]
    usage = c.get("/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {METERED}"})
    assert usage.json()["character_count"] == 0
    missing = c.post("/translate_file", data={"source": "en", "target": "fr", "api_key": KEY})
    assert missing.status_code == 400 and "file" in missing.json()["error"]


@pytest.mark.slow
def test_a_translated_file_is_gone_after_its_time(run, tmp_path):
    s = _start(run, tmp_path, documents=DocumentLimits(ttl_s=0.3))
    try:
        url = _lt_file(s.client, "a.txt", TEXT).json()["translatedFileUrl"]
        assert s.client.get(url).status_code == 200
        time.sleep(0.5)
        assert s.client.get(url).status_code == 404
    finally:
        s.stop()
    assert not list((tmp_path / "state" / "documents").iterdir())  # removed when it stopped


# DeepL


@pytest.fixture
def quick_polls(monkeypatch):
    """The deepl client polls a document's status every 5 s: here, every 50 ms."""
    import deepl.translator

    real = time.sleep
    monkeypatch.setattr(deepl.translator.time, "sleep", lambda s: real(min(s, 0.05)))


def _deepl(server, key: str = KEY):
    import deepl

    return deepl.Translator(key, server_url=server.url)


@pytest.mark.slow
def test_the_deepl_client_translates_a_word_document_and_a_text_file(server, quick_polls, tmp_path):
    translator = _deepl(server)
    docx, txt = tmp_path / "notes.docx", tmp_path / "a.txt"
    docx.write_bytes(_docx("I have two cats.", "The house is big."))
    txt.write_bytes(TEXT)
    status = translator.translate_document_from_filepath(
        docx, tmp_path / "notes.fr.docx", target_lang="FR", source_lang="EN"
    )
    expected = len("I have two cats. bold words.") + len("The house is big. bold words.")
    assert status.done and status.billed_characters == expected
    paragraphs = WordDocument(tmp_path / "notes.fr.docx").paragraphs
    assert len(paragraphs) == 2 and all(any(r.bold for r in p.runs) for p in paragraphs)
    out = io.BytesIO()
    with open(txt, "rb") as f:  # a file object: the client sends its name
        translator.translate_document(f, out, target_lang="FR")
    lines = out.getvalue().decode().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]  # paragraphs kept


@pytest.mark.slow
def test_deepl_documents_refuse_bad_requests_in_its_own_shape(server):
    import deepl

    c = server.client
    auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}

    def upload(name, data, key=KEY, **fields):
        headers = {"Authorization": f"DeepL-Auth-Key {key}"}
        form = {"target_lang": "FR", **fields}
        return c.post("/v2/document", data=form, files={"file": (name, data)}, headers=headers)

    assert upload("a.txt", TEXT, key="nope").status_code == 403
    pdf = upload("a.pdf", b"%PDF-1.4")
    assert pdf.status_code == 415 and ".docx" in pdf.json()["message"]
    assert upload("a.txt", b"cats " * 20_000).status_code == 413
    assert upload("a.docx", b"PK\x03\x04 broken").status_code == 400
    quota = upload("a.txt", TEXT, key=METERED)
    assert quota.status_code == 456 and "message" in quota.json()
    with pytest.raises(deepl.QuotaExceededException):
        _deepl(server, METERED).translate_document_upload(TEXT, target_lang="FR", filename="a.txt")
    handle = upload("a.txt", TEXT).json()
    unknown = c.post(
        "/v2/document/NOPE", json={"document_key": handle["document_key"]}, headers=auth
    )
    assert unknown.status_code == 404 and unknown.json() == {"message": "Document not found."}
    wrong = c.post(
        f"/v2/document/{handle['document_id']}", json={"document_key": "x"}, headers=auth
    )
    assert wrong.status_code == 404


@pytest.mark.slow
def test_a_deepl_document_is_gone_after_its_time(run, tmp_path):
    s = _start(run, tmp_path, documents=DocumentLimits(ttl_s=0.3))
    try:
        auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}
        form, files = {"target_lang": "FR"}, {"file": ("a.txt", TEXT)}
        handle = s.client.post("/v2/document", data=form, files=files, headers=auth).json()
        where, key = (
            f"/v2/document/{handle['document_id']}",
            {"document_key": handle["document_key"]},
        )
        deadline = time.monotonic() + 30
        while (status := s.client.post(where, json=key, headers=auth).json())["status"] != DONE:
            assert status["status"] in ("queued", "translating") and time.monotonic() < deadline
            time.sleep(0.02)
        assert s.client.post(where + "/result", json=key, headers=auth).content
        time.sleep(0.5)
        assert s.client.post(where, json=key, headers=auth).status_code == 404
        assert s.client.post(where + "/result", json=key, headers=auth).status_code == 404
    finally:
        s.stop()


@pytest.mark.slow
def test_a_deepl_document_keeps_the_terms_of_its_glossary(server, quick_polls, tmp_path):
    auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    entries = {"name": "pets", "source_lang": "en", "target_lang": "fr", "entries": "cats\tchats"}
    made = server.client.post("/v2/glossaries", data=entries, headers=auth)
    assert made.status_code == 201, made.text
    source = tmp_path / "a.txt"
    source.write_bytes(b"I have two cats.\n")
    status = _deepl(server).translate_document_from_filepath(
        source,
        tmp_path / "a.fr.txt",
        source_lang="EN",
        target_lang="FR",
        glossary=made.json()["glossary_id"],
    )
    assert status.done and "chats" in (tmp_path / "a.fr.txt").read_text().lower()
