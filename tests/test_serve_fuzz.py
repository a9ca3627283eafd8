"""Every route of `seq2seq serve`, fuzzed from the server's own OpenAPI schema (schemathesis:
bodies that fit each route's declared schema, and bodies that break it), keys off and on
(issue 51): no answer is a 5xx, every refusal has the shape of the API it was sent to
(`{"error"}` native and LibreTranslate, `{"message"}` DeepL), no request takes longer than the
server's request timeout, and with keys on, nothing gets through without one. The servers run
on loopback in this process, on an untrained run, with small request limits."""

from __future__ import annotations

import json
import time
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from seq2seq.decode.translator import load_translator
from seq2seq.serve.app import ServeConfig, create_app, run_info
from seq2seq.serve.schema import RequestLimits
from tests.factories import untrained_run
from tests.servers import LoopbackServer

schemathesis = pytest.importorskip("schemathesis", reason="the dev extra is not installed")
pytest.importorskip("uvicorn", reason="the serve extra is not installed")

# Every test starts a server and decodes.
pytestmark = pytest.mark.slow

# Small, so that a request at its bounds decodes in well under the timeout on a busy machine.
LIMITS = RequestLimits(
    max_lines=4,
    max_bytes=4096,
    max_beam_size=4,
    max_tokens=128,
    max_beam_tokens=512,
    timeout_s=10.0,
    body_timeout_s=5.0,
    max_glossary_pairs=8,
)
EXAMPLES = 50  # cases per route and mode: the file stays near a minute on two busy cores
KEY, LIMITED = "fuzz-unlimited-key", "fuzz-limited-key"
# The routes a keyed server answers only with a key (the rest say nothing about anyone).
KEYED = ("/translate", "/detect", "/v2/")
LIBRE_OWN = ("q", "source", "target", "alternatives")
LONE = "\ud800"  # a lone surrogate: JSON may spell it (as an escape), it is no text


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    return untrained_run(tmp_path_factory.mktemp("fuzz"), demo_pairs[:300])


class Fuzzed(NamedTuple):
    """A server under fuzz: where it listens, its OpenAPI schema, its language pair."""

    server: LoopbackServer
    spec: dict
    pair: tuple[str, str]


def _serve(run, **cfg) -> Fuzzed:
    config = ServeConfig(request=LIMITS, **cfg)
    translator, checkpoint = load_translator(run, device="cpu")
    info = run_info(run, checkpoint, translator, config)
    app = create_app(translator, info, config)
    pair = (info["source_language"], info["target_language"])
    return Fuzzed(LoopbackServer(app), app.openapi(), pair)


@pytest.fixture(scope="module")
def open_server(run):
    fuzzed = _serve(run)
    yield fuzzed
    fuzzed.server.stop()


@pytest.fixture(scope="module")
def keyed_server(run, tmp_path_factory):
    keys = tmp_path_factory.mktemp("fuzz-keys") / "keys.txt"
    keys.write_text(f"{KEY}\n{LIMITED} characters=50\n")
    fuzzed = _serve(run, api_keys=keys)
    yield fuzzed
    fuzzed.server.stop()


def _is_deepl(path: str) -> bool:
    return path.startswith("/v2/")


def _with_key(case, key: str) -> dict:
    """The headers presenting `key` where the case's API takes it: DeepL's `DeepL-Auth-Key`
    header, LibreTranslate's `api_key` field (put into the case's body), the native route's
    `Bearer` header."""
    if _is_deepl(case.path):
        return {"Authorization": f"DeepL-Auth-Key {key}"}
    body = getattr(case, "body", None)
    libre = case.path == "/detect" or (case.media_type or "").endswith("form-urlencoded")
    if isinstance(body, dict) and (libre or any(name in body for name in LIBRE_OWN)):
        body["api_key"] = key
        return {}
    return {"Authorization": f"Bearer {key}"}


def _problem(case, response, elapsed: float, keyless: bool) -> str | None:
    """What is wrong with an answer to `case`, or None."""
    status = response.status_code
    if status >= 500:
        return f"{status}"
    if elapsed > LIMITS.timeout_s:
        return f"took {elapsed:.1f} s, over the request timeout ({LIMITS.timeout_s:g} s)"
    if keyless and status < 300 and case.path.startswith(KEYED):
        return f"{status} without a key"
    if status < 400:
        return None
    field = "message" if _is_deepl(case.path) else "error"
    try:
        data = json.loads(response.content)
    except ValueError:
        return f"{status} whose body is not JSON: {response.content[:120]!r}"
    if not isinstance(data, dict) or not isinstance(data.get(field), str):
        return f"{status} not in its API's shape (a {field!r} string): {data!r:.200}"
    return None


def _aimed(case, aim: str, pair: tuple[str, str]):
    """The case with its language fields set to the served pair (`served`, with a glossary's
    entries a term pair), its source left to detection (`auto`), or as generated: most
    generated codes name no language, and a case that names none never reaches the decoder."""
    body, (source, target) = case.body, pair
    if aim == "generated" or not isinstance(body, dict):
        return case
    if _is_deepl(case.path):
        if "entries" in body and aim == "served":  # generated entries are rarely term pairs
            body["entries"] = "cat\tchat\n"
        if "target_lang" in body:
            body["target_lang"] = target.upper()
        if aim == "auto":
            body.pop("source_lang", None)
        elif "source_lang" in body:
            body["source_lang"] = source.upper()
    else:
        if "target" in body:
            body["target"] = target
        if "source" in body:
            body["source"] = "auto" if aim == "auto" else source
    return case


def _unpaired(case, field: int | None):
    """The case with a lone surrogate (`\\ud800`, which JSON may spell and text generators never
    draw) after one string of its JSON body (the `field`-th holding one), if `field` is given."""
    body = case.body
    if field is None or not (case.media_type or "").endswith("json") or not isinstance(body, dict):
        return case
    names = sorted(k for k, v in body.items() if isinstance(v, str) or _strings_in(v))
    if names:
        name = names[field % len(names)]
        value = body[name]
        body[name] = value + LONE if isinstance(value, str) else [*value, LONE]
    return case


def _strings_in(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _cases(operation, pair: tuple[str, str]):
    """Cases that fit the operation's schema and cases that break it (where it can be broken),
    aimed at the served languages or not, some with a lone surrogate in a string."""
    from schemathesis import GenerationMode

    strategies = [operation.as_strategy(GenerationMode.POSITIVE)]
    try:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))
    except Exception:  # nothing in the operation to break (no body, no parameters)
        pass
    aims = st.sampled_from(["served", "generated", "auto"])
    fields = st.one_of(st.none(), st.integers(0, 7))
    return st.builds(
        lambda case, aim, field: _unpaired(_aimed(case, aim, pair), field),
        st.one_of(strategies),
        aims,
        fields,
    )


def _fuzz_operation(fuzzed, operation, key: str | None, keyless: bool) -> list[str]:
    """One operation called with generated cases: a line for each answer that is wrong."""
    problems: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: each problem is reported
        suppress_health_check=list(HealthCheck),
    )
    @given(case=_cases(operation, fuzzed.pair))
    def call(case):
        headers = _with_key(case, key) if key else {}
        start = time.perf_counter()
        response = case.call(
            base_url=fuzzed.server.url, headers=headers, timeout=LIMITS.timeout_s * 3
        )
        wrong = _problem(case, response, time.perf_counter() - start, keyless)
        if wrong:
            curl = case.as_curl_command(headers).encode("ascii", "backslashreplace").decode()
            problems.append(f"{operation.label}: {wrong}\n  {curl}")

    call()
    return problems


def fuzz(fuzzed: Fuzzed, key: str | None = None, keyless: bool = False) -> list[str]:
    """Every operation of the server's OpenAPI schema called with generated cases (presenting
    `key`): a line for each answer that is wrong."""
    schema = schemathesis.openapi.from_dict(fuzzed.spec)
    problems = []
    for result in schema.get_all_operations():
        problems += _fuzz_operation(fuzzed, result.ok(), key, keyless)
    return problems


def test_every_route_that_reads_a_body_declares_it_in_the_openapi_schema(open_server):
    paths = open_server.spec["paths"]
    for path, method in [
        ("/translate", "post"),
        ("/detect", "post"),
        ("/v2/translate", "post"),
        ("/v2/glossaries", "post"),
        ("/v2/languages", "get"),
        ("/v2/usage", "get"),
        ("/v2/usage", "post"),
    ]:
        content = paths[path][method]["requestBody"]["content"]
        assert "application/json" in content, (method, path)
        assert "application/x-www-form-urlencoded" in content, (method, path)
    translate = paths["/translate"]["post"]["requestBody"]["content"]["application/json"]
    native, libre = translate["schema"]["anyOf"]
    assert "texts" in native["properties"] and "api_key" in native["properties"]
    assert libre["required"] == ["q", "source", "target"]


def test_every_operation_has_its_own_id(open_server):
    ids = [op["operationId"] for ops in open_server.spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/detect", {"q": "cats" + LONE}),  # the language identifier takes UTF-8 only
        ("/translate", {"q": "cats" + LONE, "source": "auto", "target": "fr"}),
        ("/translate", {"q": "cats", "source": LONE, "target": "fr"}),  # quoted in the refusal
        ("/translate", {"q": "cats", "source": "en", "target": "fr", "format": LONE}),
        ("/v2/translate", {"text": "cats" + LONE, "target_lang": "FR"}),  # detected source
        (
            "/v2/glossaries",
            {"name": LONE, "source_lang": "en", "target_lang": "fr", "entries": "a\tb"},
        ),
        (
            "/v2/glossaries",
            {"name": "n", "source_lang": "en", "target_lang": "fr", "entries": "a\tb" + LONE},
        ),
    ],
)
def test_a_lone_surrogate_in_a_json_body_is_answered_in_the_apis_shape(open_server, path, body):
    client = open_server.server.client
    sent = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert sent.status_code in (200, 400), sent.text
    if sent.status_code == 400:
        assert isinstance(sent.json()["message" if _is_deepl(path) else "error"], str)
    assert client.get("/v2/glossaries").status_code == 200  # nothing unreadable was kept


def test_every_route_without_keys_answers_in_its_apis_shape_within_the_timeout(open_server):
    problems = fuzz(open_server)
    assert not problems, "\n".join(problems[:20])


def test_every_route_with_keys_on_and_no_key_translates_nothing(keyed_server):
    problems = fuzz(keyed_server, keyless=True)
    assert not problems, "\n".join(problems[:20])


def test_every_route_with_a_character_limited_key_stays_within_the_limit(keyed_server):
    problems = fuzz(keyed_server, key=LIMITED)
    assert not problems, "\n".join(problems[:20])
    usage = keyed_server.server.client.get(
        "/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {LIMITED}"}
    )
    assert usage.json()["character_limit"] == 50
    assert usage.json()["character_count"] <= 50
