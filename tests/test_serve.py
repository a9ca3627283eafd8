"""`seq2seq serve`: a real server process on a free loopback port, spoken to over HTTP."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import with_changes
from seq2seq.decode.translator import load_translator
from tests.runs import cli, train_from, write_pairs_config
from tests.servers import Server

REPO = Path(__file__).resolve().parents[1]

# Every test starts a server on a trained run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_config) -> Path:
    """A real (barely trained) run; short outputs keep decoding quick."""
    config = tiny_config(
        tmp_path_factory.mktemp("serve"),
        model={"decoder_layers": 1},
        decode={"beam_size": 2, "max_len_a": 1.0, "max_len_b": 4, "batch_size": 32},
    )
    return train_from(config)


# The queue counts sentences: the slow requests below send MAX_LINES texts of two sentences.
MAX_LINES, MAX_QUEUE = 64, 256
MAX_TOKENS = 8192  # source tokens of a request; MAX_LINES texts of LONG hold some 3,400


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    """One server for most tests; its queue is small enough for a test to fill."""
    s = Server(
        run_dir,
        tmp_path_factory.mktemp("log") / "serve.log",
        *("--batch-window-ms", "20", "--max-request-lines", str(MAX_LINES)),
        *("--max-queue", str(MAX_QUEUE), "--threads", "1"),
        *("--request-timeout", "45", "--max-request-tokens", str(MAX_TOKENS)),
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference(run_dir):
    """What `seq2seq translate` gives for the same lines (greedy and the run's beam 2)."""
    translator, _ = load_translator(run_dir, device="cpu")

    def translate(lines: list[str], beam_size: int | None = None) -> list[str]:
        options = with_changes(translator.options, {"beam_size": beam_size})
        return translator.translate(lines, options=options)

    return translate


TEXTS = [
    "I have three cats.",
    "She was born on the first of May nineteen eighty.",
    "It is a quarter past five.",
    "The book costs twelve euros and fifty cents.",
    "I have two hundred and one dogs.",
]


def test_a_text_gets_its_translation_and_a_score(server, reference):
    answer = server.translate(text=TEXTS[0])
    assert answer.status_code == 200
    body = answer.json()
    assert body["translation"] == reference([TEXTS[0]])[0]
    assert isinstance(body["score"], float)


def test_texts_get_one_translation_each_in_order_as_translate_gives(server, reference):
    body = server.translate(texts=TEXTS + ["", "   "]).json()
    assert body["translations"] == reference(TEXTS + ["", "   "])
    assert len(body["scores"]) == len(TEXTS) + 2
    assert body["translations"][-2:] == ["", ""]


def test_nbest_returns_that_many_hypotheses_best_first(server):
    body = server.translate(texts=TEXTS[:2], beam_size=3, nbest=3, length_penalty=1.0).json()
    assert [len(hyps) for hyps in body["nbest"]] == [3, 3]
    for best, hyps in zip(body["translations"], body["nbest"]):
        assert hyps[0]["translation"] == best
        scores = [h["score"] for h in hyps]
        assert scores == sorted(scores, reverse=True)


def test_concurrent_requests_are_batched_and_each_caller_gets_its_own_lines(server, reference):
    batches_before = server.metric("seq2seq_batch_requests_count")
    requests_before = server.metric("seq2seq_batch_requests_sum")
    texts = [f"I have {n} cats." for n in ("two", "three", "four", "five", "six", "seven")] * 4
    expected = reference(texts)
    with ThreadPoolExecutor(len(texts)) as pool:
        answers = list(pool.map(lambda t: server.translate(text=t), texts))
    assert [a.json()["translation"] for a in answers] == expected
    batches = server.metric("seq2seq_batch_requests_count") - batches_before
    requests = server.metric("seq2seq_batch_requests_sum") - requests_before
    assert requests == len(texts)
    assert batches < len(texts)  # some requests shared a batch


def test_requests_with_different_options_in_one_window_each_get_their_own(server, reference):
    with ThreadPoolExecutor(4) as pool:
        greedy = pool.submit(server.translate, texts=TEXTS, beam_size=1)
        beam = pool.submit(server.translate, texts=TEXTS, beam_size=3, nbest=2)
    assert greedy.result().json()["translations"] == reference(TEXTS, beam_size=1)
    assert [len(h) for h in beam.result().json()["nbest"]] == [2] * len(TEXTS)
    assert beam.result().json()["translations"] == reference(TEXTS, beam_size=3)


LONG = " ".join(TEXTS[:2])  # near the tiny model's 64 positions: slow to decode


BAD_INPUTS = [
    # (what, raw body, status, field)
    ("malformed JSON", b'{"text": "I have', 400, "body"),
    ("invalid UTF-8", b'{"text": "caf\xe9"}', 400, "body"),
    ("empty body", b"", 400, "body"),
    ("NaN", b'{"text": "a", "length_penalty": NaN}', 400, "body"),
    ("deeply nested JSON", b"[" * 200_000, 400, "body"),
    ("deeply nested JSON in a field", b'{"texts": ' + b"[" * 200_000, 400, "body"),
    ("not an object", b'["I have three cats."]', 422, "body"),
    ("missing text", b'{"beam_size": 2}', 422, "text"),
    ("empty text", b'{"text": ""}', 422, "text"),
    ("blank text", b'{"text": " \\t "}', 422, "text"),
    ("text of wrong type", b'{"text": 42}', 422, "text"),
    ("text and texts", b'{"text": "a", "texts": ["b"]}', 422, "texts"),
    ("texts not a list", b'{"texts": "a"}', 422, "texts"),
    ("texts empty", b'{"texts": []}', 422, "texts"),
    ("a text in texts of wrong type", b'{"texts": ["a", 3]}', 422, "texts[1]"),
    ("lone surrogate", b'{"texts": ["a", "\\ud800"]}', 422, "texts[1]"),
    ("unknown field", b'{"text": "a", "beam": 4}', 422, "beam"),
    ("beam_size 0", b'{"text": "a", "beam_size": 0}', 422, "beam_size"),
    ("beam_size too large", b'{"text": "a", "beam_size": 17}', 422, "beam_size"),
    ("beam_size a string", b'{"text": "a", "beam_size": "4"}', 422, "beam_size"),
    ("beam_size a bool", b'{"text": "a", "beam_size": true}', 422, "beam_size"),
    ("nbest over beam_size", b'{"text": "a", "beam_size": 2, "nbest": 3}', 422, "nbest"),
    ("negative length_penalty", b'{"text": "a", "length_penalty": -1}', 422, "length_penalty"),
    ("too many texts", json.dumps({"texts": ["a"] * (MAX_LINES + 1)}).encode(), 413, "texts"),
    ("too many bytes", json.dumps({"text": "a" * 1_000_001}).encode(), 413, "body"),
    (
        "source tokens × beam size over the budget",  # ~6,800 tokens × 16 > 65,536
        json.dumps({"texts": [f"{LONG} {LONG}"] * MAX_LINES, "beam_size": 16}).encode(),
        413,
        "beam_size",
    ),
]


@pytest.mark.parametrize(
    "raw, status, field", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_is_a_4xx_naming_the_field_and_the_server_keeps_serving(
    server, raw, status, field
):
    answer = server.client.post(
        "/translate", content=raw, headers={"content-type": "application/json"}
    )
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["field"] == field
    assert error["error"]
    assert server.translate(text=TEXTS[0]).status_code == 200


def test_a_failed_translation_is_a_500_that_tells_nothing_internal(run_dir, monkeypatch):
    import logging

    from seq2seq.serve.app import log

    secret = "the model's scores are not finite for input line(s) 3, 7 of another client"

    def failing(lines, options, wanted=None):
        raise RuntimeError(secret)

    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    log.addHandler(handler)
    try:
        with _in_process(run_dir, monkeypatch, failing) as client:
            answer = client.post("/translate", json={"text": TEXTS[0]})
    finally:
        log.removeHandler(handler)
    assert answer.status_code == 500
    request_id = answer.headers["x-request-id"]
    assert answer.json() == {
        "error": f"translation failed (request {request_id}; see the server log)",
        "field": None,
    }
    assert secret not in answer.text
    assert any(request_id in line and secret in line for line in logged)


def test_unknown_paths_and_methods_answer_json_errors(server):
    assert server.client.get("/nope").json()["error"] == "Not Found"
    assert server.client.get("/translate").status_code == 405


def _when_decoding(server: Server, pending) -> None:
    """Wait until the server reports a batch being decoded (and the request still pending)."""
    while not server.metric("seq2seq_decoder_busy"):
        assert not any(p.done() for p in pending), "the requests ended before seen decoding"
        time.sleep(0.005)


def test_health_answers_while_a_batch_decodes(server):
    with ThreadPoolExecutor(2) as pool:
        slow = [
            pool.submit(server.translate, texts=[LONG] * MAX_LINES, beam_size=16) for _ in range(2)
        ]
        _when_decoding(server, slow)
        start = time.monotonic()
        assert server.client.get("/health").json() == {"status": "ok"}
        health_s = time.monotonic() - start
        assert server.metric("seq2seq_decoder_busy") == 1 or all(p.done() for p in slow)
        assert all(p.result().status_code == 200 for p in slow)
    assert health_s < 1.0


def test_a_client_that_disconnects_is_not_decoded_and_the_batch_it_would_join_is(server, reference):
    host, port = httpx.URL(server.url).host, httpx.URL(server.url).port
    body = json.dumps({"text": TEXTS[1]}).encode()
    sentences_before = server.metric("seq2seq_sentences_total")
    with ThreadPoolExecutor(8) as pool:
        # A big request keeps the decoder busy so the others queue up into one batch.
        busy = pool.submit(server.translate, texts=[LONG] * MAX_LINES, beam_size=8)
        _when_decoding(server, [busy])
        for partial in (False, True):  # gone after sending the request / half-way through it
            with socket.create_connection((host, port)) as s:
                head = f"POST /translate HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n"
                s.sendall(head.encode() + b"content-type: application/json\r\n\r\n")
                s.sendall(body[:5] if partial else body)
        time.sleep(0.2)  # the server hears of both while the big request still decodes
        others = [pool.submit(server.translate, text=t) for t in TEXTS]
        assert [o.result().json()["translation"] for o in others] == reference(TEXTS)
        assert busy.result().status_code == 200
    # Nobody waits for the whole request that was left: it was dropped from the queue, not
    # decoded; the server serves on.
    assert server.metric("seq2seq_sentences_total") - sentences_before == MAX_LINES + len(TEXTS)
    assert server.translate(text=TEXTS[0]).status_code == 200


def _in_process(run_dir, monkeypatch, decode=None, *, translator=None, **request_limits):
    """The app in this process (FastAPI's TestClient), its decoder replaced by `decode`."""
    from fastapi.testclient import TestClient

    from seq2seq.serve import app as serve_app
    from seq2seq.serve.schema import RequestLimits

    path = None
    if translator is None:
        translator, path = load_translator(run_dir, device="cpu")
    cfg = serve_app.ServeConfig(request=RequestLimits(**request_limits))
    info = serve_app.run_info(run_dir, path or run_dir, translator, cfg)
    if decode is not None:
        monkeypatch.setattr(serve_app, "translator_decode", lambda translator: decode)
    return TestClient(serve_app.create_app(translator, info, cfg))


def test_a_text_of_more_words_than_the_token_limit_is_refused_before_splitting(server):
    # 960 kB, one text: it must not pass as one line of one sentence, nor cost the server
    # seconds of sentence splitting before it is refused (every word is at least one token).
    answer = server.translate(text="Go now. " * 120_000)
    assert answer.status_code == 413
    error = answer.json()
    assert error["field"] == "text"
    assert error["error"] == f"text has 240000 words; at most {MAX_TOKENS} source tokens a request"
    assert server.translate(text=TEXTS[0]).status_code == 200


def test_a_text_of_many_sentences_is_held_to_the_token_limit_sentence_by_sentence(server):
    # Fewer words than the limit, but rare words of several pieces, each sentence with its EOS.
    answer = server.translate(text="Zqxv. " * 6_000)
    assert answer.status_code == 413
    error = answer.json()
    assert error["field"] == "text"
    assert re.fullmatch(
        rf"text has \d+ source tokens; at most {MAX_TOKENS} a request", error["error"]
    )
    assert int(error["error"].split()[2]) >= 18_000  # two pieces and EOS, for every sentence
    assert server.translate(text=TEXTS[0]).status_code == 200


def test_lines_nobody_waits_for_come_back_empty_and_the_others_unchanged(run_dir):
    translator, _ = load_translator(run_dir, device="cpu")
    sources = translator.prepare([TEXTS[0], LONG, TEXTS[2]])
    full = translator.translate_sources(sources)
    found = translator.translate_sources(sources, wanted=lambda i: i != 1)
    for i in (0, 2):  # the same words; the scores up to rounding (a batch of another shape)
        assert [text for text, _ in found[i]] == [text for text, _ in full[i]]
        assert [score for _, score in found[i]] == pytest.approx([s for _, s in full[i]], abs=1e-4)
    assert found[1] == [("", 0.0)]


def test_requests_are_parsed_split_and_encoded_once_off_the_event_loop(run_dir, monkeypatch):
    import asyncio

    translator, _ = load_translator(run_dir, device="cpu")
    tokenizer, encoded = translator.tokenizer, []

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def recording(encode):
        def wrapper(texts, *args, **kwargs):
            encoded.extend((t, on_loop()) for t in ([texts] if isinstance(texts, str) else texts))
            return encode(texts, *args, **kwargs)

        return wrapper

    # Every encoding of source text goes through SentencePiece's encode.
    monkeypatch.setattr(tokenizer.src, "encode", recording(tokenizer.src.encode))
    with _in_process(run_dir, monkeypatch, translator=translator) as client:
        answer = client.post("/translate", json={"texts": [LONG, TEXTS[2]]})
    assert answer.status_code == 200
    assert not any(loop for _, loop in encoded)  # never on the event loop
    sentences = [t for t, _ in encoded if t in TEXTS]
    assert sorted(set(sentences)) == sorted(TEXTS[:3])
    assert len(sentences) == 3  # each sentence encoded once: not again by the decoder


def test_past_the_request_timeout_the_answer_is_504_and_a_queued_request_is_dropped(
    run_dir, monkeypatch
):
    release, decoded = threading.Event(), []

    def slow(lines, options, wanted=None):
        decoded.append(len(lines))
        assert release.wait(10)
        return [[("x", 0.0)] for _ in lines]

    app = _in_process(run_dir, monkeypatch, slow, timeout_s=0.5)
    with app as client, ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, "/translate", json={"text": TEXTS[0]})
        while not decoded:
            time.sleep(0.01)
        queued = pool.submit(client.post, "/translate", json={"texts": TEXTS})
        start = time.monotonic()
        for answer in (first.result(10), queued.result(10)):
            assert answer.status_code == 504
            assert answer.json() == {
                "error": "no translation within 0.5 s (the request timeout)",
                "field": None,
            }
        assert time.monotonic() - start < 2
        release.set()
        assert client.post("/translate", json={"texts": TEXTS[:2]}).status_code == 200
    assert decoded == [1, 2]  # the request that timed out in the queue was never decoded


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(texts=st.lists(st.text(max_size=40), min_size=1, max_size=6))
def test_random_unicode_texts_always_get_one_translation_per_text(server, texts):
    answer = server.translate(texts=texts)
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    assert len(translations) == len(texts)
    assert all(isinstance(t, str) and "\n" not in t for t in translations)


def test_info_names_the_model_languages_and_checkpoint(server, run_dir):
    info = server.client.get("/info").json()
    assert info["name"] == run_dir.name
    assert (info["source_language"], info["target_language"]) == ("en", "fr")
    assert Path(info["checkpoint"]).is_file()
    assert info["decode"]["beam_size"] == 2
    assert info["limits"]["max_lines"] == MAX_LINES
    assert info["limits"]["timeout_s"] == 45
    assert info["limits"]["max_tokens"] == MAX_TOKENS


def test_metrics_are_prometheus_text_with_requests_sentences_tokens_batches_and_latency(server):
    server.translate(texts=TEXTS)
    answer = server.client.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    for name in (
        "seq2seq_requests_total",
        "seq2seq_sentences_total",
        "seq2seq_source_tokens_total",
        "seq2seq_batch_sentences_bucket",
        "seq2seq_queue_sentences",
        "seq2seq_translate_latency_seconds_bucket",
    ):
        assert re.search(rf"^{name}", text, re.M), name
    assert server.metric("seq2seq_sentences_total") >= len(TEXTS)
    assert 'seq2seq_requests_total{path="/translate",status="200"}' in text


def test_ready_health_and_the_openapi_page(server):
    assert server.client.get("/ready").json() == {"status": "ready"}
    assert server.client.get("/health").status_code == 200
    assert "/translate" in server.client.get("/openapi.json").json()["paths"]
    assert server.client.get("/docs").status_code == 200


def test_it_listens_on_loopback_unless_told_otherwise(server):
    assert server.url.startswith("http://127.0.0.1:")


def test_a_full_queue_answers_503_with_retry_after_and_recovers(server):
    refused_before = server.metric("seq2seq_queue_full_total")
    # Each request fills half the queue: while one decodes, two wait and the rest are refused.
    with ThreadPoolExecutor(12) as pool:
        answers = list(
            pool.map(lambda _: server.translate(texts=[LONG] * MAX_LINES, beam_size=4), range(12))
        )
    codes = [a.status_code for a in answers]
    assert set(codes) <= {200, 503} and 503 in codes and 200 in codes
    refused = next(a for a in answers if a.status_code == 503)
    assert int(refused.headers["retry-after"]) >= 1
    assert "queue is full" in refused.json()["error"]
    assert server.metric("seq2seq_queue_full_total") - refused_before == codes.count(503)
    assert server.translate(text=TEXTS[0]).status_code == 200


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(run_dir, tmp_path):
    s = Server(
        run_dir,
        tmp_path / "serve.log",
        *("--threads", "1", "--max-request-tokens", "16384"),
        *("--max-request-beam-tokens", "131072", "--max-batch-beam-tokens", "131072"),
    )
    texts = [LONG] * 256  # 13,568 tokens × beam 8: a long decode
    with ThreadPoolExecutor(2) as pool:
        in_flight = pool.submit(s.translate, texts=texts, beam_size=8)
        _when_decoding(s, [in_flight])
        s.process.send_signal(signal.SIGTERM)
        answer = in_flight.result(60)
        assert answer.status_code == 200
        assert len(answer.json()["translations"]) == len(texts)
    assert s.process.wait(30) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.url + "/health", timeout=2)
    assert "Traceback" not in s.log.read_text()
    s.stop()


def _half_sent(url: str) -> socket.socket:
    """A connection that sends a request's head and 5 of the 100 bytes of its body, then waits."""
    s = socket.create_connection((httpx.URL(url).host, httpx.URL(url).port), timeout=10)
    s.sendall(b"POST /translate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n")
    s.sendall(b'content-length: 100\r\n\r\n{"tex')
    return s


def _response(connection: socket.socket) -> bytes:
    """A whole response: uvicorn may send its head and body in separate packets."""
    data = b""
    while True:
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: (\d+)", head)
        if length and len(body) >= int(length.group(1)):
            return data
        chunk = connection.recv(4096)
        if not chunk:
            return data
        data += chunk


def test_a_body_that_stops_half_way_is_a_408_and_does_not_hold_a_shutdown(run_dir, tmp_path):
    s = Server(run_dir, tmp_path / "serve.log", "--threads", "1", "--body-timeout", "1")
    try:
        with _half_sent(s.url) as stalled:
            start = time.monotonic()
            head, _, body = _response(stalled).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408")
            assert time.monotonic() - start < 5
            assert json.loads(body) == {
                "error": "request body not received within 1 s",
                "field": "body",
            }
        with _half_sent(s.url):
            time.sleep(0.2)
            start = time.monotonic()
            s.process.send_signal(signal.SIGTERM)
            assert s.process.wait(15) == 0
            assert time.monotonic() - start < 5
    finally:
        s.stop()


def test_a_taken_port_is_one_error_line(run_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--run", str(run_dir), "--port", str(port)])
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot listen on 127.0.0.1:")


def test_a_request_budget_over_the_batch_budget_is_one_error_line(run_dir):
    options = ["--max-request-beam-tokens", "200000", "--max-batch-beam-tokens", "100000"]
    result = CliRunner().invoke(app, ["serve", "--run", str(run_dir), "--port", "0", *options])
    assert result.exit_code == 1
    assert result.output.startswith(
        "error: --max-request-beam-tokens (200000) must not exceed --max-batch-beam-tokens (100000)"
    )


def test_html_requests_get_their_tags_back_and_malformed_markup_is_a_422(run_dir, monkeypatch):
    from seq2seq.decode.markup import same_markup

    tagged = ["Click <b>three cats</b> now, {name}.", 'She was <a href="x">born</a> in May.']
    with _in_process(run_dir, monkeypatch) as client:
        answer = client.post("/translate", json={"texts": tagged, "format": "html"})
        plain = client.post("/translate", json={"text": "It is a quarter past five."})
        single = client.post("/translate", json={"text": "<i>It is</i> late.", "format": "xml"})
        malformed = client.post("/translate", json={"texts": ["ok", "<b>open"], "format": "html"})
        nbest = client.post("/translate", json={"text": "<b>x</b>", "format": "html", "nbest": 2})
    assert answer.status_code == 200, answer.text
    for source, output in zip(tagged, answer.json()["translations"]):
        assert same_markup(source, output), (source, output)  # well-formed, the same tags
    assert plain.status_code == 200 and single.status_code == 200
    assert same_markup("<i>It is</i> late.", single.json()["translation"], "xml")
    assert malformed.status_code == 422
    assert malformed.json()["field"] == "texts[1]"
    assert "malformed html markup" in malformed.json()["error"]
    assert nbest.status_code == 422 and nbest.json()["field"] == "format"


def test_a_request_is_answered_without_asyncio_timeout_which_python_3_10_lacks(
    run_dir, monkeypatch
):
    import asyncio

    monkeypatch.delattr(asyncio, "timeout", raising=False)  # as on Python 3.10
    with _in_process(run_dir, monkeypatch) as client:
        answer = client.post("/translate", json={"text": TEXTS[0]})
    assert answer.status_code == 200, answer.text


def test_a_text_of_more_characters_than_the_token_limit_can_hold_is_refused_unread(server):
    # One "word" to the word count: only its characters tell it is far over the limit.
    start = time.monotonic()
    answer = server.translate(text="." * 400_000)
    assert time.monotonic() - start < 2
    assert answer.status_code == 413
    error = answer.json()
    assert error["field"] == "text"
    assert re.fullmatch(
        rf"text has 400000 characters besides spaces; at most \d+ a request \(as many as "
        rf"{MAX_TOKENS} source tokens can hold\)",
        error["error"],
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": "Zqxv " * 1000}, "text"),  # one sentence of some 3,000 tokens
        ({"texts": [TEXTS[0], "Zqxv " * 1000]}, "texts[1]"),
        ({"text": "x" * 2_000}, "text"),  # no space at all
    ],
)
def test_a_sentence_longer_than_the_model_reads_is_a_413_not_the_translation_of_its_head(
    server, body, field
):
    answer = server.translate(**body)
    assert answer.status_code == 413, answer.text
    error = answer.json()
    assert error["field"] == field
    assert re.fullmatch(
        rf"{re.escape(field)} holds a sentence of \d+ source tokens; the model reads at most "
        r"64 \(split it into shorter sentences\)",
        error["error"],
    )


def test_twenty_thousand_characters_without_a_space_are_a_413(run_dir, monkeypatch):
    with _in_process(run_dir, monkeypatch, max_tokens=32_768) as client:  # some 20,000 tokens
        answer = client.post("/translate", json={"text": "x" * 20_000})
    assert answer.status_code == 413, answer.text
    assert answer.json()["field"] == "text"
    assert "holds a sentence of" in answer.json()["error"]


def test_a_plain_request_is_never_decoded_in_one_call_with_a_constrained_one(run_dir, monkeypatch):
    release, calls = threading.Event(), []

    def recording(sources, options, wanted=None):
        calls.append([bool(s.constraints) for s in sources])
        assert release.wait(10)
        return [[("x", 0.0)] for _ in sources]

    with _in_process(run_dir, monkeypatch, recording) as client, ThreadPoolExecutor(4) as pool:
        first = pool.submit(client.post, "/translate", json={"text": TEXTS[1]})
        while not calls:
            time.sleep(0.01)
        glossary = {"text": TEXTS[0], "glossary": [["cats", "chats"]]}
        queued = [pool.submit(client.post, "/translate", json=glossary)]
        queued += [pool.submit(client.post, "/translate", json={"text": t}) for t in TEXTS[2:4]]
        time.sleep(0.5)  # all three wait in the queue for the decoder
        release.set()
        assert all(a.result(10).status_code == 200 for a in [first, *queued])
    assert [True] in calls  # the constrained request, alone
    assert all(len(set(call)) == 1 for call in calls), calls


def test_a_language_tag_or_end_of_sentence_inside_a_text_is_read_as_text_not_as_the_token(
    tmp_path_factory, demo_pairs, monkeypatch
):
    folder = tmp_path_factory.mktemp("tagged")  # en→fr and fr→en, the target's tag leading
    cli("--quiet", "train", "-c", write_pairs_config(folder, demo_pairs, "source_tag"))
    seen = []

    def recording(sources, options, wanted=None):
        seen.extend(seq for source in sources for seq in source.segments)
        return [[("x", 0.0)] for _ in sources]

    text = "hello >>en<< world </s> x"
    with _in_process(folder / "run", monkeypatch, recording) as client:
        body = {"text": text, "source_lang": "en", "target_lang": "fr"}
        answer = client.post("/translate", json=body)
    assert answer.status_code == 200, answer.text
    tokenizer = load_translator(folder / "run", device="cpu")[0].tokenizer
    fr, en, eos = tokenizer.language_id("fr"), tokenizer.language_id("en"), tokenizer.ids.eos
    (ids,) = seen
    assert ids[0] == fr and ids[-1] == eos  # what the server itself puts around the text
    assert fr not in ids[1:] and en not in ids and eos not in ids[:-1]
    assert tokenizer.encode_src([text], "en", "fr")[0].count(eos) == 2  # as the tokenizer reads it


def test_how_long_an_abandoned_glossary_request_went_on_decoding_is_in_the_metrics(
    run_dir, monkeypatch
):
    release = threading.Event()

    def slow(sources, options, wanted=None):
        assert release.wait(10)
        return [[("x", 0.0)] for _ in sources]

    app = _in_process(run_dir, monkeypatch, slow, timeout_s=0.3)
    with app as client:
        glossary = {"text": TEXTS[0], "glossary": [["cats", "chats"]]}
        assert client.post("/translate", json=glossary).status_code == 504  # abandoned
        time.sleep(0.3)  # decoding goes on after the timeout
        release.set()
        end, line = time.monotonic() + 10, 'seq2seq_abandoned_decode_seconds_count{work="terms"}'
        while line not in (text := client.get("/metrics").text) and time.monotonic() < end:
            time.sleep(0.02)
    count = re.search(re.escape(line) + r" (\S+)", text)
    assert count and float(count.group(1)) == 1.0
    total = re.search(r'seq2seq_abandoned_decode_seconds_sum\{work="terms"\} (\S+)', text)
    assert 0.3 <= float(total.group(1)) < 5
