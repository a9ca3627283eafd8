"""Servers the serve tests talk to: `seq2seq serve` as a child process (`Server`), and the
app under uvicorn in a thread of the test's process (`LoopbackServer`)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from seq2seq.serve.server import listening_socket

REPO = Path(__file__).resolve().parents[1]


class Server:
    """`seq2seq serve` in a child process; its log goes to a file (a full pipe would stall it)."""

    def __init__(self, run: Path, log: Path, *options: str):
        self.log = log
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            # `timeout` ends the server by itself should this test process die first.
            ["timeout", "600", sys.executable, "-m", "seq2seq", "serve", "--run", str(run)]
            + ["--port", "0", "--device", "cpu", *options],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),  # noqa: SIM115 (the child holds it)
        )
        self.url = self._wait_for_url()
        self.client = httpx.Client(base_url=self.url, timeout=30)
        while self.client.get("/ready").status_code != 200:
            time.sleep(0.05)

    def _wait_for_url(self, timeout: float = 60) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = re.search(r"on (http://\S+:\d+)", self.log.read_text(errors="replace"))
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"server did not start: {self.log.read_text()}")

    def translate(self, **body) -> httpx.Response:
        return self.client.post("/translate", json=body)

    def metric(self, name: str) -> float:
        text = self.client.get("/metrics").text
        return sum(
            float(m) for m in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        )

    def stop(self) -> int:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


class LoopbackServer:
    """The app under uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app):
        import uvicorn  # the optional serve extra: the tests using this skip without it

        self.sock = listening_socket("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def free_port() -> int:
    """A loopback port nobody listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server() -> Iterator[str | None]:
    """The URL of a redis-server of the tests' own on a free loopback port, answering PING; None
    when the binary is not installed (.ci/run installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_redis(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def _wait_for_redis(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not answer within 10 s")
