"""One glossary, one text, whichever API brings it (issue 53): the same lines and the same term
pairs sent to the native /translate (`glossary`), LibreTranslate's /translate (its `glossary`
field, pairs or TSV lines) and DeepL's /v2/translate (a glossary made with /v2/glossaries, then
its `glossary_id`) come back as the same text, the one the Translator itself gives them in the
run's term mode. The server runs on a loopback port in this process, on the tiny trained run."""

from __future__ import annotations

import pytest

from seq2seq.config import load_run_config
from seq2seq.decode.glossary import with_pairs
from seq2seq.decode.translator import Translator, load_translator
from seq2seq.serve.app import ServeConfig, create_app, run_info
from tests.servers import LoopbackServer

uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")

# Every test starts a server and decodes.
pytestmark = pytest.mark.slow

LINES = [
    "She sells three small black cats.",
    "The bicycle costs forty-two euros. You want one big blue chair.",
    "There are sixty-nine mice in the park.",
    "The shirt costs 677.07 euros.",
]
# Some the model would not choose (matous, bécane, siège, jardin), one it would (chemise).
PAIRS = [
    ("cats", "matous"),
    ("bicycle", "bécane"),
    ("chair", "siège"),
    ("park", "jardin"),
    ("shirt", "chemise"),
]


def _start(run, **decode) -> tuple[LoopbackServer, Translator]:
    """A server on `run` (the run's decoding options changed by `decode`) and a Translator of
    its own, loaded the same way, to compare with."""
    config, options = ServeConfig(), load_run_config(run).decode.model_copy(update=decode)
    translator, checkpoint = load_translator(run, device="cpu", decode=options)
    info = run_info(run, checkpoint, translator, config)
    reference, _ = load_translator(run, device="cpu", decode=options)
    return LoopbackServer(create_app(translator, info, config)), reference


def _native(server: LoopbackServer, lines: list[str], pairs, **options) -> list[str]:
    body = {"texts": lines, "glossary": [list(p) for p in pairs], **options}
    answer = server.client.post("/translate", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["translations"]


def _libretranslate(
    server: LoopbackServer, lines: list[str], pairs, form: bool, **fields
) -> list[str]:
    body = {"q": lines, "source": "en", "target": "fr", **fields}
    if form:  # a form's glossary is TSV lines; q given once a line is a list of them
        tsv = "".join(f"{a}\t{b}\n" for a, b in pairs)
        answer = server.client.post("/translate", data={**body, "glossary": tsv})
        assert answer.status_code == 200, answer.text
        return answer.json()["translatedText"]
    answer = server.client.post("/translate", json={**body, "glossary": [list(p) for p in pairs]})
    assert answer.status_code == 200, answer.text
    return answer.json()["translatedText"]


def _deepl(server: LoopbackServer, lines: list[str], pairs, **fields) -> list[str]:
    entries = "".join(f"{a}\t{b}\n" for a, b in pairs)
    made = server.client.post(
        "/v2/glossaries",
        json={"name": "terms", "source_lang": "EN", "target_lang": "FR", "entries": entries},
    )
    assert made.status_code == 201, made.text
    glossary_id = made.json()["glossary_id"]
    answer = server.client.post(
        "/v2/translate",
        json={"text": lines, "source_lang": "EN", "target_lang": "FR", "glossary_id": glossary_id}
        | fields,
    )
    server.client.delete(f"/v2/glossaries/{glossary_id}")
    assert answer.status_code == 200, answer.text
    return [t["text"] for t in answer.json()["translations"]]


def _terms_held(lines: list[str], texts: list[str]) -> list[list[str]]:
    """Each line's target terms that its text holds (of the terms whose source it holds)."""
    return [[t for s, t in PAIRS if s in line and t in text] for line, text in zip(lines, texts)]


def _translator_texts(translator: Translator, lines: list[str], pairs, beam: int) -> list[str]:
    options = translator.options.model_copy(update={"beam_size": beam, "nbest": 1})
    glossary = with_pairs(None, list(pairs), origin="glossary")
    sources = translator.prepare(lines, options, glossary=glossary, truncate=False)
    return [hyps[0][0] for hyps in translator.translate_sources(sources, options=options)]


@pytest.fixture(scope="module")
def served(trained_tiny_run):
    server, reference = _start(trained_tiny_run)
    yield server, reference
    server.stop()


def test_one_glossary_gives_one_text_through_native_libretranslate_and_deepl(served):
    server, reference = served
    native = _native(server, LINES, PAIRS)
    assert _libretranslate(server, LINES, PAIRS, form=False) == native
    assert _libretranslate(server, LINES, PAIRS, form=True) == native
    assert _deepl(server, LINES, PAIRS) == native
    assert native == _translator_texts(reference, LINES, PAIRS, reference.options.beam_size)


def test_each_route_holds_the_terms_the_translator_holds(served):
    server, reference = served
    expected = _translator_texts(reference, LINES, PAIRS, reference.options.beam_size)
    held = _terms_held(LINES, expected)
    assert any(held), expected  # the glossary reached the text: a test of something
    for texts in (
        _native(server, LINES, PAIRS),
        _libretranslate(server, LINES, PAIRS, form=False),
        _deepl(server, LINES, PAIRS),
    ):
        assert _terms_held(LINES, texts) == held


def test_tagged_lines_with_a_glossary_give_one_text_through_native_libretranslate_and_deepl(
    served,
):
    server, _ = served
    tagged = ["<p>She sells three small <b>black</b> cats.</p>", "The <i>bicycle</i> costs two."]
    native = _native(server, tagged, PAIRS, format="html")
    assert _libretranslate(server, tagged, PAIRS, form=False, format="html") == native
    assert _deepl(server, tagged, PAIRS, tag_handling="html") == native
    assert "matous" in native[0] and "bécane" in native[1]


def test_a_greedy_server_decodes_every_routes_glossary_at_the_same_beam(trained_tiny_run):
    # The server's default is greedy: a glossary needs a beam of 2, which LibreTranslate and
    # DeepL choose themselves and a native request names.
    server, reference = _start(trained_tiny_run, beam_size=1)
    try:
        native = _native(server, LINES, PAIRS, beam_size=2)
        assert _libretranslate(server, LINES, PAIRS, form=False) == native
        assert _deepl(server, LINES, PAIRS) == native
        assert native == _translator_texts(reference, LINES, PAIRS, 2)
    finally:
        server.stop()


def test_a_run_that_keeps_two_best_still_gives_deepl_the_one_text_libretranslate_gets(
    trained_tiny_run,
):
    # Neither API answers with the run's n-best (DeepL never, LibreTranslate only the
    # `alternatives` asked for): a line of two sentences is split and decoded alike by both,
    # as a native request for one best is.
    server, reference = _start(trained_tiny_run, nbest=2)
    try:
        native = _native(server, LINES, PAIRS, nbest=1)
        assert _libretranslate(server, LINES, PAIRS, form=False) == native
        assert _deepl(server, LINES, PAIRS) == native
        assert native == _translator_texts(reference, LINES, PAIRS, reference.options.beam_size)
    finally:
        server.stop()
