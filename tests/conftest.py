"""Shared fixtures. Tests run offline, with their own datasets cache, from a fresh clone."""

from __future__ import annotations

import os
import signal
import tempfile

# Before anything imports `datasets`: no network, and a cache that is not the user's.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="seq2seq-test-hf-"))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.data.demo_corpus import generate_pairs  # noqa: E402
from tests.factories import tiny_shape  # noqa: E402
from tests.hf_models import write_marian_tokenizer  # noqa: E402
from tests.runs import train_from, write_tiny_config  # noqa: E402
from tests.servers import redis_server  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _keep_sigpipe():
    # `translate` and `score` set SIGPIPE to the default action, as a shell filter should; run
    # in-process they would leave it so, and a later test writing to a socket its peer closed
    # would kill pytest itself ("make: *** Broken pipe").
    saved = signal.getsignal(signal.SIGPIPE)
    yield
    signal.signal(signal.SIGPIPE, saved)


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    return tiny_shape()


@pytest.fixture(scope="session")
def demo_pairs() -> list[tuple[str, str]]:
    return generate_pairs(2000, seed=7)


@pytest.fixture(scope="session")
def tiny_config(demo_pairs):
    """`tiny_config(folder, pairs=…, model={…}, …)`: writes the tiny config (these keys changed)."""

    def write(folder: Path, pairs: list[tuple[str, str]] | None = None, **sections) -> Path:
        return write_tiny_config(folder, demo_pairs[:300] if pairs is None else pairs, **sections)

    return write


@pytest.fixture(scope="session")
def trained_tiny_run(tiny_config, tmp_path_factory) -> Path:
    """A run trained once on the tiny config: read it, or change a `copy_run` of it."""
    return train_from(tiny_config(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def marian_tokenizer(tmp_path_factory, demo_pairs) -> Path:
    """OPUS-MT-style MarianTokenizer files trained on the demo pairs (needs transformers)."""
    return write_marian_tokenizer(tmp_path_factory.mktemp("marian-tokenizer"), demo_pairs)


@pytest.fixture(scope="session")
def redis_url():
    """A real redis-server on a free loopback port for the tests that share state through it;
    they skip without the binary."""
    with redis_server() as url:
        if url is None:
            pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
        yield url
