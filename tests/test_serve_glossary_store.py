"""DeepL glossaries on `seq2seq serve` (issue 51 items 6, 9 and 13): a glossary belongs to the
key that made them (another key's looks exactly like a missing one, caps are per key), they
are kept in a store that outlives the process (SQLite in `--state-dir`, or Redis shared by
replicas), and entries that every later use would refuse are refused when the glossary is made."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.serve.app import ServeConfig, create_app, run_info
from seq2seq.serve.glossaries import MAX_GLOSSARIES
from seq2seq.serve.glossary_store import (
    MemoryGlossaries,
    RedisGlossaries,
    SqliteGlossaries,
    open_glossaries,
)
from tests.factories import untrained_run
from tests.servers import LoopbackServer, free_port

PETS = {"name": "pets", "source": "en", "target": "fr", "entries": [("cats", "chats")]}
OWNER, OTHER = "key-a", "key-b"


def _opener(kind: str, tmp_path, request):
    """A function opening a fresh handle (with `cap`) on one store of `kind`."""
    if kind == "memory":
        one = MemoryGlossaries()
        return lambda cap=MAX_GLOSSARIES: one if one.cap == cap else MemoryGlossaries(cap)
    if kind == "sqlite":
        return lambda cap=MAX_GLOSSARIES: SqliteGlossaries(tmp_path / "glossaries.sqlite3", cap)
    url, prefix = request.getfixturevalue("redis_url"), f"test-{uuid.uuid4()}:"
    return lambda cap=MAX_GLOSSARIES: RedisGlossaries(url, cap, prefix=prefix)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def opener(request, tmp_path):
    return _opener(request.param, tmp_path, request)


@pytest.fixture(params=["sqlite", "redis"])
def lasting(request, tmp_path):
    return _opener(request.param, tmp_path, request)


# The store


def test_a_glossary_is_seen_listed_and_removed_only_by_the_key_that_made_it(opener):
    store = opener()
    made = store.add(OWNER, **PETS)
    assert store.get(OWNER, made.glossary_id) == made
    assert store.get(OTHER, made.glossary_id) is None
    assert store.get(None, made.glossary_id) is None
    assert store.listed(OTHER) == [] and store.listed(OWNER) == [made]
    assert not store.remove(OTHER, made.glossary_id)
    assert store.get(OWNER, made.glossary_id) == made
    assert store.remove(OWNER, made.glossary_id)
    assert store.get(OWNER, made.glossary_id) is None and store.listed(OWNER) == []


def test_the_cap_is_per_key_so_one_key_cannot_fill_the_store_for_another(opener):
    store = opener(cap=2)
    assert store.add(OTHER, **PETS) and store.add(OTHER, **PETS)
    assert store.add(OTHER, **PETS) is None
    assert store.add(OWNER, **PETS) is not None
    removed = store.listed(OTHER)[0]
    assert store.remove(OTHER, removed.glossary_id) and store.add(OTHER, **PETS) is not None


def test_glossaries_outlive_the_handle_that_made_them(lasting):
    made = lasting().add(OWNER, **PETS | {"entries": [("Cats", "chats"), ("dog", "chien")]})
    again = lasting()
    assert again.listed(OWNER) == [made]
    assert again.get(OWNER, made.glossary_id).entries == [("Cats", "chats"), ("dog", "chien")]
    assert again.get(OWNER, made.glossary_id).info() == made.info()


def test_replicas_racing_on_one_store_hold_a_keys_cap_together(lasting):
    cap, handles = 5, [lasting(cap=5) for _ in range(4)]
    made: list = []
    start = threading.Barrier(len(handles))

    def fill(store) -> None:
        start.wait()
        made.extend(g for g in (store.add(OWNER, **PETS) for _ in range(cap)) if g is not None)

    threads = [threading.Thread(target=fill, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(made) == cap and len(handles[0].listed(OWNER)) == cap


def test_a_state_dir_holds_glossaries_sqlite3_and_none_keeps_them_in_memory(tmp_path):
    assert isinstance(open_glossaries(None, None), MemoryGlossaries)
    store = open_glossaries(tmp_path / "state", None)
    assert isinstance(store, SqliteGlossaries)
    assert (tmp_path / "state" / "glossaries.sqlite3").is_file()


def test_a_state_dir_that_cannot_hold_the_store_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match="--state-dir"):
        open_glossaries(tmp_path / "file", None)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "glossaries.sqlite3").write_text("not a database " * 100)
    with pytest.raises(UserError, match="glossaries.sqlite3"):
        open_glossaries(tmp_path / "state", None)


def test_a_redis_url_nobody_answers_is_one_clear_error():
    with pytest.raises(UserError, match="--redis-url"):
        open_glossaries(None, f"redis://127.0.0.1:{free_port()}/0")


# Over HTTP

KEYS = ["alice", "bob", "carol", "dave", "erin"]
MISSING = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_pairs):
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    return untrained_run(tmp_path_factory.mktemp("glossary-store"), demo_pairs[:300])


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("\n".join(KEYS) + "\n")
    return path


def _start(run, **cfg) -> LoopbackServer:
    config = ServeConfig(**cfg)
    translator, checkpoint = load_translator(run, device="cpu")
    return LoopbackServer(
        create_app(translator, run_info(run, checkpoint, translator, config), config)
    )


@pytest.fixture(scope="module")
def keyed(run, keys_file):
    s = _start(run, api_keys=keys_file)
    yield s
    s.stop()


def _auth(key: str) -> dict:
    return {"authorization": f"DeepL-Auth-Key {key}"}


def _create(server, key: str, entries: str = "cats\tchats\n") -> httpx.Response:
    body = {"name": "pets", "source_lang": "EN", "target_lang": "FR", "entries": entries}
    return server.client.post("/v2/glossaries", json=body, headers=_auth(key))


def _translate(server, key: str, glossary_id: str) -> httpx.Response:
    body = {"text": ["I have three cats."], "source_lang": "EN", "target_lang": "FR"}
    return server.client.post(
        "/v2/translate", json=body | {"glossary_id": glossary_id}, headers=_auth(key)
    )


@pytest.mark.slow
def test_another_keys_glossary_looks_exactly_like_a_missing_one(keyed):
    made = _create(keyed, "alice")
    assert made.status_code == 201, made.text
    theirs = made.json()["glossary_id"]
    bob = _auth("bob")
    for path in ("/v2/glossaries/{}", "/v2/glossaries/{}/entries"):
        other = keyed.client.get(path.format(theirs), headers=bob)
        missing = keyed.client.get(path.format(MISSING), headers=bob)
        assert other.status_code == missing.status_code == 404
        assert other.json() == missing.json() == {"message": "Glossary not found."}
    assert keyed.client.get("/v2/glossaries", headers=bob).json() == {"glossaries": []}
    used, missing = _translate(keyed, "bob", theirs), _translate(keyed, "bob", MISSING)
    assert used.status_code == missing.status_code == 404
    assert used.json() == missing.json() == {"message": "Glossary not found."}
    deleted = keyed.client.delete(f"/v2/glossaries/{theirs}", headers=bob)
    assert deleted.status_code == 404 and deleted.json() == {"message": "Glossary not found."}
    alice = _auth("alice")
    assert (
        keyed.client.get(f"/v2/glossaries/{theirs}/entries", headers=alice).text == "cats\tchats\n"
    )
    listed = keyed.client.get("/v2/glossaries", headers=alice).json()["glossaries"]
    assert [g["glossary_id"] for g in listed] == [theirs]
    assert _translate(keyed, "alice", theirs).status_code == 200


@pytest.mark.slow
def test_a_key_at_its_glossary_cap_gets_456_and_other_keys_still_make_theirs(keyed):
    for _ in range(MAX_GLOSSARIES):
        assert _create(keyed, "carol").status_code == 201
    full = _create(keyed, "carol")
    assert full.status_code == 456 and list(full.json()) == ["message"]
    assert _create(keyed, "dave").status_code == 201


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ("Cats\tchats\ncats\tchiens\n", "entries row 2"),  # the same source term, case-folded
        ("cats\tchats\n\n...\tpoints\n", "entries row 3"),  # punctuation alone
        ("cats\t" + "x" * 201 + "\n", "entries row 1"),  # a target over 200 characters
        ("cats\tchats\n" + "x" * 201 + "\tchats\n", "entries row 2"),  # a source likewise
    ],
)
def test_entries_every_use_would_refuse_are_refused_when_the_glossary_is_made(
    keyed, entries, named
):
    answer = _create(keyed, "erin", entries)
    assert answer.status_code == 400, answer.text
    assert list(answer.json()) == ["message"] and answer.json()["message"].startswith(named)
    assert keyed.client.get("/v2/glossaries", headers=_auth("erin")).json() == {"glossaries": []}


@pytest.mark.slow
def test_glossaries_outlive_a_restart_on_the_same_state_dir(run, keys_file, tmp_path):
    first = _start(run, api_keys=keys_file, state_dir=tmp_path / "state")
    try:
        made = _create(first, "alice", "cats\tchats\ndogs\tchiens\n").json()
    finally:
        first.stop()
    again = _start(run, api_keys=keys_file, state_dir=tmp_path / "state")
    try:
        alice = _auth("alice")
        assert again.client.get("/v2/glossaries", headers=alice).json() == {"glossaries": [made]}
        entries = again.client.get(f"/v2/glossaries/{made['glossary_id']}/entries", headers=alice)
        assert entries.text == "cats\tchats\ndogs\tchiens\n"
        used = _translate(again, "alice", made["glossary_id"])
        assert used.status_code == 200 and "chats" in used.json()["translations"][0]["text"].lower()
        assert _translate(again, "bob", made["glossary_id"]).status_code == 404
    finally:
        again.stop()


@pytest.mark.slow
def test_replicas_sharing_one_redis_see_and_use_each_others_glossaries(run, keys_file, redis_url):
    one = _start(run, api_keys=keys_file, redis_url=redis_url)
    two = _start(run, api_keys=keys_file, redis_url=redis_url)
    try:
        made = _create(one, "alice").json()
        alice = _auth("alice")
        assert two.client.get(f"/v2/glossaries/{made['glossary_id']}", headers=alice).json() == made
        used = _translate(two, "alice", made["glossary_id"])
        assert used.status_code == 200 and "chats" in used.json()["translations"][0]["text"].lower()
        assert (
            two.client.delete(f"/v2/glossaries/{made['glossary_id']}", headers=alice).status_code
            == 204
        )
        assert one.client.get("/v2/glossaries", headers=alice).json() == {"glossaries": []}
    finally:
        one.stop()
        two.stop()
