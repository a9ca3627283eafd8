"""`seq2seq serve`: a trained model behind HTTP, concurrent requests decoded in dynamic batches.

The model is loaded once; an ASGI app (FastAPI on uvicorn) parses and checks requests on the event
loop and hands their lines to a `Batcher`, whose one worker thread decodes through the run's
`Translator`, so /health and /metrics answer while a batch decodes.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at
# run time, and `Request` is imported inside `create_app` (fastapi is an optional extra).

import asyncio
import copy
import logging
import math
import signal
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import DecodeConfig, load_run_config
from ..errors import UserError
from ..translator import Translator
from .batcher import Batcher, BatchLimits, Hypotheses, QueueFull, Stopped
from .schema import (
    RequestError,
    RequestLimits,
    TranslateBody,
    TranslateRequest,
    parse_translate_request,
)

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
KNOWN_PATHS = ("/translate", "/health", "/ready", "/metrics", "/info", "/docs", "/openapi.json")


@dataclass(frozen=True)
class ServeConfig:
    """Where to listen and how to batch and bound requests."""

    host: str = "127.0.0.1"
    port: int = 8080
    batch: BatchLimits = field(default_factory=BatchLimits)
    request: RequestLimits = field(default_factory=RequestLimits)


def translator_decode(translator: Translator):
    """The batcher's decode function: the run's Translator, with a request's search options."""

    def decode(lines: list[str], options: DecodeConfig) -> list[Hypotheses]:
        # A shallow copy shares the model and tokenizer and keeps whatever else the Translator
        # holds; only its decode settings change.
        t = copy.copy(translator)
        t.decode = options
        return t.translate_nbest(lines)

    return decode


def run_info(run_dir: Path, checkpoint: Path, translator: Translator, cfg: ServeConfig) -> dict:
    """What GET /info answers: the model's name, languages, checkpoint, shape and settings."""
    from ..info import run_summary

    run_cfg = load_run_config(run_dir)
    summary = run_summary(run_dir)
    d = translator.decode
    return {
        "name": Path(run_dir).resolve().name,
        "run_dir": str(Path(run_dir).resolve()),
        "source_language": run_cfg.data.src_lang,
        "target_language": run_cfg.data.tgt_lang,
        "checkpoint": str(Path(checkpoint).resolve()),
        "steps_trained": summary["steps_trained"],
        "best_bleu": summary["best_bleu"],
        "model": summary["model"],
        "parameters": summary["parameters"],
        "tokenizer": summary["tokenizer"],
        "device": str(translator.device),
        "decode": {"beam_size": d.beam_size, "nbest": d.nbest, "length_penalty": d.length_penalty},
        "limits": {
            **asdict(cfg.request),
            "batch_window_ms": cfg.batch.window_s * 1000,
            "max_batch_tokens": cfg.batch.max_tokens,
            "max_batch_requests": cfg.batch.max_requests,
            "max_queue_lines": cfg.batch.max_queue_lines,
        },
        "version": __version__,
    }


class _ServerState:
    """What the endpoints share: the batcher once started, and whether shutdown has begun."""

    def __init__(self) -> None:
        self.batcher: Batcher | None = None
        self.draining = False


def create_app(
    translator: Translator,
    info: dict[str, Any],
    cfg: ServeConfig,
    state: _ServerState | None = None,
):
    """The ASGI app: /translate, /health, /ready, /metrics, /info (and FastAPI's /docs)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect

    from .metrics import CONTENT_TYPE, ServerMetrics

    state = state or _ServerState()
    metrics = ServerMetrics()
    defaults = translator.decode  # what a request does not choose, the run's settings decide

    @asynccontextmanager
    async def lifespan(app):
        batcher = Batcher(translator_decode(translator), cfg.batch, metrics.on_batch).start()
        metrics.watch(batcher)
        state.batcher = batcher
        try:
            yield
        finally:
            # uvicorn comes here after the requests in flight were answered; anything still
            # queued is decoded before the worker ends.
            state.draining = True
            await asyncio.to_thread(batcher.stop)

    app = FastAPI(
        title="seq2seq",
        version=__version__,
        description=f"Translation server for {info['name']} "
        f"({info['source_language']}→{info['target_language']}).",
        lifespan=lifespan,
    )
    app.add_middleware(_CountRequests, metrics=metrics)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        return JSONResponse(
            {"error": str(exc.detail), "field": None}, exc.status_code, headers=exc.headers
        )

    @app.get("/health")
    async def health():
        """Live: the process answers (even while a batch decodes)."""
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        """Ready: the model is loaded and the server is not shutting down."""
        if state.batcher is None or state.draining:
            status = "draining" if state.draining else "loading"
            return JSONResponse({"status": status}, 503)
        return {"status": "ready"}

    @app.get("/info")
    async def get_info():
        """The model: name, languages, checkpoint, shape, default decoding, limits."""
        return info

    @app.get("/metrics")
    async def get_metrics():
        """Prometheus text format."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    schema = TranslateBody.model_json_schema()

    @app.post(
        "/translate",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        },
    )
    async def translate(request: Request):
        """Translate `{"text": …}` or `{"texts": […]}`; answers the translations and scores."""
        start = time.perf_counter()
        try:
            body = await _read_body(request, cfg.request.max_bytes)
            req = parse_translate_request(body, cfg.request, defaults)
        except RequestError as e:
            return JSONResponse(e.as_json(), e.status)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is left to read it
        batcher = state.batcher
        if batcher is None:
            return _unavailable("the model is not loaded yet", 1)
        # One line at a time: SentencePiece starts a thread pool for every list it encodes.
        tokens = sum(len(translator.tokenizer.src.encode(line)) + 1 for line in req.lines)
        try:
            future = batcher.submit(req.lines, req.options, tokens)
        except QueueFull as e:
            metrics.rejected.inc()
            return _unavailable(f"{e}; retry later", e.retry_after_s)
        except Stopped:
            return _unavailable("the server is shutting down", 1)
        try:
            results = await asyncio.wrap_future(future)
        except Exception as e:
            log.error("translation failed: %s", e)
            return JSONResponse({"error": f"translation failed: {e}", "field": None}, 500)
        metrics.latency.observe(time.perf_counter() - start)
        return _answer(req, results)

    return app


def _unavailable(message: str, retry_after_s: float):
    from fastapi.responses import JSONResponse

    return JSONResponse(
        {"error": message, "field": None},
        503,
        headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))},
    )


async def _read_body(request, limit: int) -> bytes:
    """The body, refused as soon as it is known to be over the limit."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise RequestError(413, "body", f"request body over {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body", f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _score(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _answer(req: TranslateRequest, results: list[Hypotheses]) -> dict:
    """`{"translation", "score"}` for a text, `{"translations", "scores"}` for texts; with
    nbest > 1 also every hypothesis."""

    def nbest(hyps: Hypotheses) -> list[dict]:
        return [{"translation": t, "score": _score(s)} for t, s in hyps]

    if req.single:
        text, score = results[0][0]
        out: dict[str, Any] = {"translation": text, "score": _score(score)}
        if req.options.nbest > 1:
            out["nbest"] = nbest(results[0])
        return out
    out = {
        "translations": [hyps[0][0] for hyps in results],
        "scores": [_score(hyps[0][1]) for hyps in results],
    }
    if req.options.nbest > 1:
        out["nbest"] = [nbest(hyps) for hyps in results]
    return out


class _CountRequests:
    """ASGI middleware counting answered requests by path and status."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.metrics.requests.labels(path, str(status)).inc()


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


def serve(
    run_dir: Path,
    cfg: ServeConfig,
    checkpoint: Path | None = None,
    device: str = "auto",
    decode_overrides: dict | None = None,
    threads: int | None = None,
    quiet: bool = False,
) -> None:
    """Load the run's model once and serve it until SIGTERM or Ctrl-C (then drain and exit)."""
    try:
        import uvicorn
    except ImportError:
        raise UserError("seq2seq serve needs its extra: pip install 'seq2seq[serve]'") from None
    from ..runtime import set_threads
    from ..translator import load_translator

    if cfg.request.max_lines > cfg.batch.max_queue_lines:
        raise UserError(
            f"--max-request-lines ({cfg.request.max_lines}) must not exceed --max-queue "
            f"({cfg.batch.max_queue_lines})"
        )
    sock = listening_socket(cfg.host, cfg.port)  # a taken port fails before the model loads
    set_threads(threads)
    try:
        translator, path = load_translator(run_dir, checkpoint, device, decode_overrides)
        info = run_info(run_dir, path, translator, cfg)
    except BaseException:
        sock.close()
        raise
    state = _ServerState()
    app = create_app(translator, info, cfg, state)
    host, port = sock.getsockname()[:2]
    if cfg.host not in LOOPBACK:
        log.warning(
            "listening on %s: other machines can reach this server, which has no "
            "authentication; put it behind a proxy you trust",
            cfg.host,
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
    config = uvicorn.Config(
        app,
        log_level="warning" if quiet else "info",
        access_log=False,  # one log line per request costs the decoder CPU under load
        lifespan="on",
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


def _drained(signum, frame) -> None:
    """SIGTERM after uvicorn has finished the requests in flight: nothing left to do."""


def _uvicorn_server(config, state: _ServerState):
    """uvicorn's Server, marking the app as draining as soon as a stop signal arrives."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            state.draining = True
            super().handle_exit(sig, frame)

    return Server(config)
