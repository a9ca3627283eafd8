"""What one request may make the server hold or do before it is refused: a request's glossary
is bounded by its terms' characters and built only once the cheap checks pass, the glossaries
kept for later requests are bounded in bytes, and a request over the size limits is refused
before its markup is parsed, on every route."""

from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc

import pytest

from seq2seq.config import DecodeConfig
from seq2seq.decode import glossary as glossary_module
from seq2seq.decode.glossary import GlossaryCache, glossary_bytes, make_glossary
from seq2seq.serve.schema import (
    RequestError,
    RequestLimits,
    parse_translate_request,
    request_glossary,
)

MB = 1 << 20


def _cjk_terms(rng: random.Random, count: int, chars: int) -> list[list[str]]:
    """`count` pairs of `chars`-character CJK terms, none like another."""

    def term() -> str:
        return "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(chars))

    return [[term(), term()] for _ in range(count)]


@pytest.fixture(autouse=True)
def _no_glossaries_kept():
    glossary_module.REQUEST_GLOSSARIES.clear()
    yield
    glossary_module.REQUEST_GLOSSARIES.clear()


def _checked(body: dict, limits: RequestLimits | None = None):
    """The request as the server reads it, its glossary built (or the RequestError)."""
    limits = limits or RequestLimits()
    req = parse_translate_request(json.dumps(body).encode(), limits, DecodeConfig(beam_size=4))
    request_glossary(req, None)
    return req


def test_a_request_glossary_of_more_term_characters_than_the_limit_is_a_413_naming_it():
    limits = RequestLimits(max_glossary_chars=700)
    pairs = [["cat" * 50, "chat" * 50]] * 2 + [["dog", "chien"]]  # 150 + 200, twice, + 8
    with pytest.raises(RequestError) as refused:
        _checked({"text": "a cat", "glossary": pairs}, limits)
    assert refused.value.status == 413 and refused.value.field == "glossary"
    assert refused.value.message == (
        "glossary has 708 characters in its terms; at most 700 a request"
    )
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0  # nothing was built
    assert _checked({"text": "a cat", "glossary": pairs[:2]}, limits).glossary == [
        tuple(p) for p in pairs[:2]
    ]


def test_the_term_character_limit_is_20000_by_default():
    assert RequestLimits().max_glossary_chars == 20_000


def test_a_request_refused_after_its_glossary_is_read_builds_no_glossary():
    body = {"text": "a cat", "glossary": [["cat", "chat"]]}
    with pytest.raises(RequestError, match="beam_size"):
        _checked({**body, "beam_size": 99})
    with pytest.raises(RequestError, match="nbest 1"):
        _checked({**body, "format": "html", "nbest": 2})
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0
    _checked(body)
    assert len(glossary_module.REQUEST_GLOSSARIES) == 1  # built once the checks pass


def _retained(work, *args) -> int:
    """Bytes still allocated after `work(*args)`, once garbage is collected."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    work(*args)
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def test_64_requests_of_1000_pairs_of_200_character_cjk_terms_pin_no_memory():
    # The shape: a 611 kB request kept ~68 MB in the glossary cache, refused or not.
    base = [term for term, _ in _cjk_terms(random.Random(0), 1000, 200)]
    limits, defaults = RequestLimits(), DecodeConfig(beam_size=4)

    def requests():
        for r in range(64):  # each its own terms: a glossary the cache has not seen
            pairs = [[chr(0x4E00 + r) + term[1:], f"t{i}"] for i, term in enumerate(base)]
            body = json.dumps({"text": "a", "glossary": pairs}, ensure_ascii=False).encode()
            assert 600_000 < len(body) < 650_000
            try:
                request_glossary(parse_translate_request(body, limits, defaults), None)
            except RequestError as e:
                assert e.status == 413 and e.field == "glossary"

    tracemalloc.start()
    try:
        kept = _retained(requests)
    finally:
        tracemalloc.stop()
    assert kept < 1 * MB, f"{kept / MB:.1f} MB kept"
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0


def test_the_estimate_of_a_glossarys_memory_is_what_it_holds_within_a_margin():
    rng = random.Random(1)
    shapes = {
        "cjk": _cjk_terms(rng, 100, 100),
        "words": [[f"term{i} word{i % 97}", f"terme{i} mot"] for i in range(1000)],
        "short": [[f"w{i}", f"m{i}"] for i in range(2000)],
    }
    for name, pairs in shapes.items():
        make_glossary([tuple(p) for p in pairs])  # fills the caches of folded text first
        text = json.dumps(pairs)
        made = []
        tracemalloc.start()
        try:  # the pairs as a request brings them: strings of their own
            held = _retained(
                lambda text, made: made.append(make_glossary(json.loads(text))), text, made
            )
        finally:
            tracemalloc.stop()
        estimate = glossary_bytes(made[0])
        # One index node counted for each unit of each term: terms that end alike share
        # nodes, so the estimate may be over, never under.
        assert held <= estimate <= 2.5 * held, (name, held, estimate)


def test_the_kept_glossaries_stay_within_the_caches_bytes_the_least_recently_used_dropped():
    rng = random.Random(2)
    cache = GlossaryCache(max_bytes=4 * MB)
    requests = [[tuple(p) for p in _cjk_terms(rng, 10, 100)] for _ in range(64)]  # 2,000 chars
    for pairs in requests:  # fills the caches of folded text first
        make_glossary(pairs)
    first = cache.get(tuple(requests[0]), "glossary")

    def fill():
        for pairs in requests[1:]:
            assert cache.get(tuple(requests[0]), "glossary") is first  # kept: used the most
            cache.get(tuple(pairs), "glossary")

    tracemalloc.start()
    try:
        kept = _retained(fill)
    finally:
        tracemalloc.stop()
    assert cache.bytes <= 4 * MB and kept <= 4 * MB
    assert 8 <= len(cache) < 63  # some kept, the oldest dropped
    assert cache.get(tuple(requests[-1]), "glossary") is cache.get(tuple(requests[-1]), "glossary")


def test_a_glossary_larger_than_the_whole_cache_is_built_but_not_kept():
    cache = GlossaryCache(max_bytes=1000)
    pairs = (("cat", "chat"), ("dog", "chien"))
    assert cache.get(pairs, "glossary").pairs == pairs
    assert len(cache) == 0 and cache.bytes == 0


def test_the_servers_glossary_cache_is_bounded_in_bytes():
    assert glossary_module.REQUEST_GLOSSARIES.max_bytes == 64 * MB


# The routes: a server in this process on an untrained run.


@pytest.fixture(scope="module")
def client(tmp_path_factory, demo_pairs):
    from fastapi.testclient import TestClient

    from seq2seq.decode.translator import load_translator
    from seq2seq.serve import app as serve_app
    from tests.factories import untrained_run

    run = untrained_run(tmp_path_factory.mktemp("limits"), demo_pairs[:300])
    translator, path = load_translator(run, device="cpu")
    # Few tokens a request, so that a text under DeepL's 128 KiB is over the character limit.
    limits = RequestLimits(max_tokens=1000, max_glossary_chars=1000)
    cfg = serve_app.ServeConfig(request=limits)
    info = serve_app.run_info(run, path, translator, cfg)
    with TestClient(serve_app.create_app(translator, info, cfg)) as c:
        yield c


# 1,000 words of 100 letters in bold: 108 kB, within the word count, over the characters.
BIG_HTML = " ".join(f"<b>{'abcdefghij' * 10}</b>" for _ in range(1000))
# Each API's body for it, the refusal's status and the key of its message.
ROUTES = {
    "native": ("/translate", {"text": BIG_HTML, "format": "html"}, 413, "error"),
    "libretranslate": (
        "/translate",
        {"q": BIG_HTML, "source": "en", "target": "fr", "format": "html"},
        400,
        "error",
    ),
    "deepl": (
        "/v2/translate",
        {"text": [BIG_HTML], "target_lang": "FR", "tag_handling": "html"},
        413,
        "message",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_html_over_the_character_limit_is_refused_at_once_without_parsing_its_markup(
    client, route, monkeypatch
):
    from seq2seq.serve import schema

    parsed = []
    monkeypatch.setattr(schema, "parse", lambda line, fmt: parsed.append(line))
    path, body, status, key = ROUTES[route]
    start = time.perf_counter()
    answer = client.post(path, json=body)
    took = time.perf_counter() - start
    assert answer.status_code == status, answer.text
    assert "characters besides spaces" in answer.json()[key]
    assert parsed == [] and took < 1.0


# Four pairs of 300 characters: over the client's limit of 1,000.
LONG_PAIRS = [[word * 50, "x" * 150] for word in ("cat", "dog", "cow", "pig")]
LONG_GLOSSARY = "glossary has 1200 characters in its terms; at most 1000 a request"


@pytest.mark.slow
def test_a_glossary_over_the_term_character_limit_gets_the_native_apis_413(client):
    body = {"text": "a cat", "glossary": LONG_PAIRS, "beam_size": 2}
    answer = client.post("/translate", json=body)
    assert answer.status_code == 413
    assert answer.json() == {"error": LONG_GLOSSARY, "field": "glossary"}
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0


@pytest.mark.slow
def test_a_lone_surrogate_in_a_glossary_term_is_refused_naming_the_pair(client):
    # JSON may escape one ("\ud800"); the tokenizer cannot take it (found by test_serve_fuzz).
    native = {"text": "hi", "glossary": [["hi", "x\ud800"]], "beam_size": 2}
    as_json = {"content-type": "application/json"}  # json.dumps escapes it, as a client would
    answer = client.post("/translate", content=json.dumps(native), headers=as_json)
    assert answer.status_code == 422 and answer.json()["field"] == "glossary[0][1]"
    libre = {"q": "hi", "source": "en", "target": "fr", "glossary": [["hi", "x\ud800"]]}
    answer = client.post("/translate", content=json.dumps(libre), headers=as_json)
    assert answer.status_code == 400 and "lone surrogate" in answer.json()["error"]


@pytest.mark.slow
def test_a_glossary_over_the_term_character_limit_gets_libretranslates_400(client):
    body = {"q": "a cat", "source": "en", "target": "fr", "glossary": LONG_PAIRS}
    answer = client.post("/translate", json=body)
    assert answer.status_code == 400
    assert answer.json() == {"error": f"Invalid request: {LONG_GLOSSARY}"}
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0


@pytest.mark.slow
def test_a_glossary_over_the_term_character_limit_is_refused_when_deepl_is_asked_to_keep_it(
    client,
):
    made = client.post(
        "/v2/glossaries",
        json={
            "name": "long",
            "source_lang": "en",
            "target_lang": "fr",
            "entries": "".join(f"{a}\t{b}\n" for a, b in LONG_PAIRS),
        },
    )
    # Kept, it would be refused by every translation that used it.
    assert made.status_code == 413, made.text
    assert "characters in its terms" in made.json()["message"]
    assert client.get("/v2/glossaries").json() == {"glossaries": []}
    assert len(glossary_module.REQUEST_GLOSSARIES) == 0
