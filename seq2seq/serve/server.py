"""The `seq2seq serve` process: a listening socket, the model loaded once, uvicorn until a stop
signal, then a drain of the requests in flight."""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
from pathlib import Path

from seq2seq.config import DecodeConfig
from seq2seq.decode.glossary import read_glossary
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.runtime import set_threads
from seq2seq.serve.app import ServeConfig, ServerState, create_app, run_info

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening socket, or one clear error (port taken, unknown host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UserError(f"cannot listen on host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    # proto must say TCP: asyncio sets TCP_NODELAY only on sockets that do, and without it
    # Nagle's algorithm holds each response's body back for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {e.strerror} (another --port? 0 picks a free one)"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def default_state_dir(environ=os.environ) -> Path:
    """Where `serve` keeps its state by default: $XDG_STATE_HOME/seq2seq/serve."""
    home = environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(home) / "seq2seq" / "serve"


def make_state_dir(cfg: ServeConfig) -> None:
    """The state directory, created if need be; one that cannot be is one clear error."""
    if cfg.state_dir is None:
        return
    try:
        Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--state-dir {cfg.state_dir}: cannot create it ({e.strerror})") from None


def _check_limits(cfg: ServeConfig) -> None:
    """A request limit above its batch limit could never be met: one clear error."""
    if cfg.request.max_lines > cfg.batch.max_queue_lines:
        raise UserError(
            f"--max-request-lines ({cfg.request.max_lines}) must not exceed --max-queue "
            f"({cfg.batch.max_queue_lines})"
        )
    if cfg.request.max_beam_tokens > cfg.batch.max_beam_tokens:
        raise UserError(
            f"--max-request-beam-tokens ({cfg.request.max_beam_tokens}) must not exceed "
            f"--max-batch-beam-tokens ({cfg.batch.max_beam_tokens})"
        )


def _announce(cfg: ServeConfig, info: dict, path: Path, sock: socket.socket) -> None:
    """Where the server listens, and a warning when other machines can reach it."""
    host, port = sock.getsockname()[:2]
    if cfg.host not in LOOPBACK and cfg.api_keys is None:
        log.warning(
            "listening on %s: other machines can reach this server, which has no "
            "authentication (no --api-keys): anyone who reaches it may translate",
            cfg.host,
        )
    elif cfg.host not in LOOPBACK:
        log.warning(
            "listening on %s: other machines can reach this server; every translating route "
            "needs a key of %s, while /, /health, /ready, /metrics, /info, /models, /languages "
            "and /docs are open (and show no paths)",
            cfg.host,
            cfg.api_keys,
        )
    log.info(
        "serving %s (%s→%s, %s) on http://%s:%d (API docs at /docs)",
        info["name"],
        info["source_language"],
        info["target_language"],
        path.name,
        f"[{host}]" if ":" in host else host,
        port,
    )


def serve(
    run_dir: Path,
    cfg: ServeConfig,
    *,
    checkpoint: Path | None = None,
    device: str = "auto",
    decode: DecodeConfig | None = None,
    threads: int | None = None,
    quiet: bool = False,
    glossary: Path | None = None,
    shortlist: bool = False,
    extra_runs: list[Path] = (),
) -> None:
    """Load the run's model once and serve it until SIGTERM or Ctrl-C (then drain and exit);
    `glossary`: the term pairs every request is decoded with (a request may add its own);
    `shortlist`: score only the run's lexical shortlist; `extra_runs`: more models, each with
    its own decoding settings, requests routed to them by their languages."""
    try:
        import uvicorn  # optional: the `serve` extra
    except ImportError:
        raise UserError("seq2seq serve needs its extra: pip install 'seq2seq[serve]'") from None
    _check_limits(cfg)
    make_state_dir(cfg)
    terms = read_glossary(glossary) if glossary is not None else None
    sock = listening_socket(cfg.host, cfg.port)  # a taken port fails before the model loads
    set_threads(threads)
    try:
        translator, path = load_translator(
            run_dir, checkpoint, device, decode=decode, glossary=terms, shortlist=shortlist
        )
        info = run_info(run_dir, path, translator, cfg)
        extra = [_load_extra(run, device, terms, shortlist, cfg) for run in extra_runs]
        state = ServerState()
        # May refuse the glossary: close the port.
        app = create_app(translator, info, cfg, state, extra=[(t, i) for t, i, _ in extra])
    except BaseException:
        sock.close()
        raise
    _announce(cfg, info, path, sock)
    _announce_extra(extra)
    config = uvicorn.Config(
        app,
        log_level="warning" if quiet else "info",
        access_log=False,  # one log line per request costs the decoder CPU under load
        lifespan="on",
        # Every handler ends within the body and request timeouts (408, 504); this bounds a
        # stop whatever else holds a connection.
        timeout_graceful_shutdown=shutdown_timeout(cfg),
    )
    server = _uvicorn_server(config, state)
    # uvicorn re-raises the signal that stopped it once it has drained; SIGTERM's default
    # action would then kill the process, so a handled SIGTERM ends it with status 0 instead.
    previous = signal.signal(signal.SIGTERM, _drained)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if not server.started:
        raise UserError("the server did not start (see the messages above)")
    log.info("stopped")


def _announce_extra(extra: list) -> None:
    """One log line for each model served beside the first."""
    for _, other, other_path in extra:
        log.info(
            "also serving %s (%s→%s, %s)",
            other["name"],
            other["source_language"],
            other["target_language"],
            other_path.name,
        )


def _load_extra(run_dir: Path, device: str, terms, shortlist: bool, cfg: ServeConfig):
    """Another run's model, with its own decoding settings: (translator, /info, checkpoint)."""
    translator, path = load_translator(run_dir, None, device, glossary=terms, shortlist=shortlist)
    return translator, run_info(run_dir, path, translator, cfg), path


def shutdown_timeout(cfg: ServeConfig) -> int:
    """Seconds a stop waits for the requests in flight before cancelling them."""
    return math.ceil(cfg.request.body_timeout_s + cfg.request.timeout_s) + 5


def _drained(signum, frame) -> None:
    """SIGTERM after uvicorn has finished the requests in flight: nothing left to do."""


def _uvicorn_server(config, state: ServerState):
    """uvicorn's Server, marking the app as draining as soon as a stop signal arrives."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            state.draining = True
            super().handle_exit(sig, frame)

    return Server(config)
