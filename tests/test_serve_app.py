"""Serving without a server process or a trained run: the app in this process (FastAPI's
TestClient) on an untrained run — its routes, the request schema's refusals, the Prometheus
metrics — the listening socket, and `serve` on a folder that is not a run."""

from __future__ import annotations

import re
import socket

import pytest
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.decode.translator import load_translator
from seq2seq.serve.app import ServeConfig, create_app, run_info
from seq2seq.serve.server import listening_socket
from tests.factories import untrained_run

testclient = pytest.importorskip("fastapi.testclient", reason="fastapi is not installed")


@pytest.fixture(scope="module")
def client(tmp_path_factory, demo_pairs):
    run = untrained_run(tmp_path_factory.mktemp("serve"), demo_pairs[:300])
    translator, checkpoint = load_translator(run, device="cpu")
    cfg = ServeConfig()
    served = create_app(translator, run_info(run, checkpoint, translator, cfg), cfg)
    with testclient.TestClient(served) as client:  # `with`: the lifespan starts the batcher
        yield client


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_each_text_gets_one_translation_and_the_metrics_count_the_request(client):
    texts = ["I have three cats.", "", "It is a quarter past five."]
    answer = client.post("/translate", json={"texts": texts})
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    assert len(translations) == 3 and translations[1] == "" and all(translations[::2])
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'seq2seq_requests_total{path="/translate",status="200"} 1.0' in metrics.text
    assert _metric(metrics.text, "seq2seq_sentences_total") >= 2
    assert _metric(metrics.text, "seq2seq_translate_latency_seconds_count") == 1


def test_status_routes_answer_and_a_malformed_body_is_a_422_naming_its_field(client):
    assert client.get("/health").status_code == 200
    assert client.get("/ready").json() == {"status": "ready"}
    info = client.get("/info").json()
    assert (info["source_language"], info["target_language"]) == ("en", "fr")
    refused = client.post("/translate", json={"texts": "not a list"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "texts"


def test_a_folder_that_is_not_a_run_is_one_error_line(tmp_path):
    result = CliRunner().invoke(app, ["serve", "--run", str(tmp_path), "--port", "0"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "not a run directory" in result.output


def test_the_listening_socket_is_tcp_so_answers_are_not_held_back_by_nagle():
    # asyncio turns TCP_NODELAY on only for sockets whose protocol says TCP; without it each
    # answer's body waited for the client's delayed ACK (~40 ms a request).
    sock = listening_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
