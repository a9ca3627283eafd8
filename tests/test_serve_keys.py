"""A public `seq2seq serve` (hardening items 1, 5, 9, 11, 15): with --api-keys every route that
translates needs a key and the status routes show no paths; a key's characters are reserved
before decoding, so no request and no crowd of them overshoots its limit; the usage outlives a
restart (SQLite in the state dir) and is shared by replicas through Redis; a keys file reads
`#` as a comment only at a word's start; DeepL's routes answer 404 and 405 in its own shape."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.serve.app import ServeConfig, create_app, run_info
from seq2seq.serve.keys import KeyCheck, KeyLimits, presented_key, read_keys
from seq2seq.serve.server import _announce, default_state_dir, listening_socket
from seq2seq.serve.usage import MemoryUsage, RedisUsage, SqliteUsage, open_usage
from tests.factories import untrained_run
from tests.servers import LoopbackServer, free_port

KEY, LIMITED, METERED = "secret-key", "limited-key", "metered#key"
KEYS_FILE = (
    f"# who may call\n{KEY}   # comments after a space\n{LIMITED} 2\n{METERED} characters=20\n"
)


# The keys file


def test_a_key_with_a_hash_inside_is_kept_whole_with_its_limits(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS_FILE + "\t# an indented comment\nab#cd#ef 5 characters=100 # why\n")
    assert read_keys(keys) == {
        KEY: KeyLimits(),
        LIMITED: KeyLimits(2),
        METERED: KeyLimits(None, 20),
        "ab#cd#ef": KeyLimits(5, 100),
    }


@pytest.mark.parametrize("line", ["k 5#no-space", "k characters=20#x", "kéy 5", "k\x7f 5"])
def test_a_key_line_that_fails_to_parse_is_an_error_not_a_silent_prefix(tmp_path, line):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"good\n{line}\n")
    with pytest.raises(UserError, match="line 2"):
        read_keys(keys)


def test_the_key_is_read_from_bearer_deepl_x_api_key_or_the_body():
    assert presented_key({"authorization": "Bearer a#b"}) == "a#b"
    assert presented_key({"authorization": "DeepL-Auth-Key k:fx"}) == "k:fx"
    assert presented_key({"x-api-key": "x"}, {"api_key": "body"}) == "x"
    assert presented_key({}, {"api_key": "lt"}) == "lt"
    assert presented_key({}, {"auth_key": "dl"}) == "dl"
    assert presented_key({"authorization": "Basic Zm9v"}, {}) is None


def test_the_default_state_dir_follows_xdg_state_home(tmp_path):
    assert default_state_dir({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "seq2seq" / "serve"
    assert default_state_dir({}).parts[-4:] == (".local", "state", "seq2seq", "serve")


# Reserving characters


def _crowd(reserve, tries: int = 8) -> int:
    """How many of `tries` parallel reservations got through."""
    with ThreadPoolExecutor(tries) as pool:
        return sum(pool.map(lambda _: reserve(), range(tries)))


def test_a_key_check_reserves_characters_and_refunds_them(tmp_path):
    keys = KeyCheck({"m": KeyLimits(None, 20)}, SqliteUsage(tmp_path / "usage.sqlite3"))
    assert keys.reserve("m", 5700) is not None  # larger than the limit: refused outright
    assert keys.usage("m") == (0, 20)
    assert _crowd(lambda: keys.reserve("m", 11) is None) == 1
    keys.refund("m", 11)
    assert keys.usage("m") == (0, 20)
    assert keys.reserve("m", 20) is None and keys.reserve("m", 1) is not None


def test_two_replicas_on_one_sqlite_file_cannot_overshoot(tmp_path):
    stores = [SqliteUsage(tmp_path / "usage.sqlite3") for _ in range(4)]
    passed = _crowd(lambda: stores[threading.get_ident() % 4].reserve("k", 3, 20), 16)
    assert passed == 6 and stores[0].used("k") == 18
    assert open_usage(None, None).__class__ is MemoryUsage


def test_replicas_sharing_redis_cannot_overshoot(redis_url):
    stores = [RedisUsage(redis_url) for _ in range(4)]
    passed = _crowd(lambda: stores[threading.get_ident() % 4].reserve("r", 3, 20), 16)
    assert passed == 6 and stores[1].used("r") == 18
    stores[2].refund("r", 3)
    assert stores[3].used("r") == 15


def test_an_unreachable_redis_is_one_error_at_start():
    with pytest.raises(UserError, match="--redis-url"):
        RedisUsage(f"redis://127.0.0.1:{free_port()}/0")


# The start-up warning


@pytest.mark.parametrize("keys", [None, "keys.txt"])
def test_the_start_up_warning_tells_the_truth_about_authentication(tmp_path, caplog, keys):
    cfg = ServeConfig(host="0.0.0.0", api_keys=keys and tmp_path / keys)
    info = {"name": "run", "source_language": "en", "target_language": "fr"}
    sock = listening_socket("127.0.0.1", 0)
    with caplog.at_level(logging.WARNING):
        _announce(cfg, info, tmp_path / "best.safetensors", sock)
    sock.close()
    if keys is None:
        assert "no authentication" in caplog.text
    else:
        assert "no authentication" not in caplog.text and "needs a key" in caplog.text


# A server


uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    return untrained_run(tmp_path_factory.mktemp("keys-run"), demo_pairs[:300])


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(KEYS_FILE)
    return path


def _start(run, **cfg) -> LoopbackServer:
    config = ServeConfig(**cfg)
    translator, checkpoint = load_translator(run, device="cpu")
    return LoopbackServer(
        create_app(translator, run_info(run, checkpoint, translator, config), config)
    )


@pytest.fixture
def keyed(run, keys_file):
    s = _start(run, api_keys=keys_file)
    yield s
    s.stop()


LT = {"source": "en", "target": "fr"}


@pytest.mark.slow
def test_with_keys_the_native_route_needs_a_key_as_every_translating_route_does(keyed):
    c = keyed.client
    missing = c.post("/translate", json={"text": "It is five."})
    assert missing.status_code == 401 and missing.json()["field"] == "api_key"
    wrong = c.post("/translate", json={"text": "x"}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert c.post("/translate", json={"text": "x", "api_key": KEY}).status_code == 200
    assert c.post("/translate", json={"text": "x"}, headers={"X-API-Key": KEY}).status_code == 200
    bearer = {"Authorization": f"Bearer {KEY}"}
    assert c.post("/translate", json={"text": "x"}, headers=bearer).json()["translation"]
    assert c.post("/translate", json={"q": "x", **LT}, headers=bearer).status_code == 200
    codes = [
        c.post("/translate", json={"texts": ["x"]}, headers={"X-API-Key": LIMITED}).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    assert c.post("/v2/translate", json={"text": ["x"], "target_lang": "FR"}).status_code == 403


@pytest.mark.slow
def test_with_keys_the_status_routes_show_no_filesystem_paths(keyed, run):
    for path in ("/info", "/models", "/health", "/ready", "/openapi.json"):
        answer = keyed.client.get(path)
        assert answer.status_code == 200
        assert str(run.resolve()) not in answer.text and "run_dir" not in answer.text
    assert keyed.client.get("/info").json()["checkpoint"].endswith(".safetensors")


@pytest.mark.slow
def test_a_request_over_what_is_left_is_refused_before_decoding_in_each_apis_shape(keyed):
    c, big = keyed.client, "I have two cats. " * 335  # 5,695 characters
    lt = c.post("/translate", json={"q": big, **LT, "api_key": METERED})
    assert lt.status_code == 429 and "character limit" in lt.json()["error"]
    dl = c.post("/v2/translate", data={"text": big, "target_lang": "FR", "auth_key": METERED})
    assert dl.status_code == 456 and "message" in dl.json()
    native = c.post("/translate", json={"text": big}, headers={"X-API-Key": METERED})
    assert native.status_code == 429 and "character limit" in native.json()["error"]
    bad = c.post("/v2/translate", data={"text": "x", "target_lang": "XX", "auth_key": METERED})
    assert bad.status_code == 400  # refused after its reservation: refunded
    usage = c.get("/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {METERED}"})
    assert usage.json() == {"character_count": 0, "character_limit": 20}


@pytest.mark.slow
def test_parallel_requests_of_one_key_never_overshoot_its_character_limit(keyed):
    body = {"q": "It is five.", **LT, "api_key": METERED}  # 11 characters, 20 allowed
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda _: keyed.client.post("/translate", json=body).status_code, range(8))
        )
    assert sorted(codes) == [200] + [429] * 7
    usage = keyed.client.post("/v2/usage", data={"auth_key": METERED}).json()
    assert usage == {"character_count": 11, "character_limit": 20}


@pytest.mark.slow
def test_a_restarted_server_keeps_each_keys_usage_and_still_refuses_it(run, keys_file, tmp_path):
    header = {"Authorization": f"DeepL-Auth-Key {METERED}"}
    first = _start(run, api_keys=keys_file, state_dir=tmp_path)
    body = {"text": ["I have two cats."], "target_lang": "FR"}  # 16 characters
    assert first.client.post("/v2/translate", json=body, headers=header).status_code == 200
    first.stop()
    assert (tmp_path / "usage.sqlite3").exists()
    second = _start(run, api_keys=keys_file, state_dir=tmp_path)
    try:
        usage = second.client.get("/v2/usage", headers=header).json()
        assert usage == {"character_count": 16, "character_limit": 20}
        again = second.client.post("/v2/translate", json=body, headers=header)
        assert again.status_code == 456
    finally:
        second.stop()


@pytest.mark.slow
def test_two_replicas_on_one_redis_share_each_keys_usage(run, keys_file, redis_url):
    header = {"Authorization": f"DeepL-Auth-Key {METERED}"}
    body = {"text": ["I have two cats."], "target_lang": "FR"}  # 16 characters
    replicas = [_start(run, api_keys=keys_file, redis_url=redis_url) for _ in range(2)]
    try:
        assert (
            replicas[0].client.post("/v2/translate", json=body, headers=header).status_code == 200
        )
        usage = replicas[1].client.get("/v2/usage", headers=header).json()
        assert usage == {"character_count": 16, "character_limit": 20}
        assert (
            replicas[1].client.post("/v2/translate", json=body, headers=header).status_code == 456
        )
    finally:
        for replica in replicas:
            replica.stop()


@pytest.mark.slow
def test_deepls_404_and_405_answers_are_in_its_message_shape(keyed):
    missing = keyed.client.get("/v2/nothing")
    assert missing.status_code == 404 and set(missing.json()) == {"message"}
    wrong = keyed.client.put("/v2/translate")
    assert wrong.status_code == 405 and set(wrong.json()) == {"message"}
    assert set(keyed.client.get("/nothing").json()) == {"error", "field"}


@pytest.mark.slow
def test_the_page_asks_for_a_key_and_sends_it(keyed):
    html = keyed.client.get("/").text
    assert (
        '<input id="key"' in html and '"Bearer "' in html and 'fetch("frontend/settings")' in html
    )
    settings = keyed.client.get("/frontend/settings").json()
    assert settings["keyRequired"] is True
    assert keyed.client.get("/info").json()["decode"]["beam_size"] >= 1  # what the page reads
