"""The ASGI app of `seq2seq serve`: its endpoints, and what they share.

The app (FastAPI, run by uvicorn in `server`) parses, checks, splits and encodes each request
on a worker thread (`Translator.prepare`) and hands the encoded lines to a `Batcher`, whose one
worker thread decodes them through the run's `Translator`; the event loop only reads bodies and
answers, so /health and /metrics answer while a request is parsed or a batch decodes.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at
# run time, and `Request` is imported inside the functions that add them (fastapi is an
# optional extra).

import asyncio
import json
import logging
import math
import re
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from seq2seq import __version__
from seq2seq.config import DecodeConfig, load_run_config
from seq2seq.data.multilingual import SPECIAL_STRINGS
from seq2seq.decode.annotate import translate_sources
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.translator import Source, Translator
from seq2seq.errors import UserError
from seq2seq.report.info import run_summary
from seq2seq.serve.batcher import (
    Batcher,
    BatchLimits,
    Hypotheses,
    JobFuture,
    OverBudget,
    QueueFull,
    Stopped,
)
from seq2seq.serve.bodies import native_or_libretranslate
from seq2seq.serve.deepl import add_routes as add_deepl_routes
from seq2seq.serve.documents import DocumentLimits, DocumentStore
from seq2seq.serve.forms import ClientGone, Declined, read_body
from seq2seq.serve.glossary_store import open_glossaries
from seq2seq.serve.keys import KeyCheck, presented_key, read_keys, refunding
from seq2seq.serve.langs import served_pairs
from seq2seq.serve.libretranslate import MAX_ALTERNATIVES
from seq2seq.serve.libretranslate import add_routes as add_libretranslate_routes
from seq2seq.serve.libretranslate import asks as libretranslate_asks
from seq2seq.serve.page import add_route as add_page_route
from seq2seq.serve.schema import (
    RequestError,
    RequestLimits,
    TranslateRequest,
    check_characters,
    check_sentence_tokens,
    check_source_tokens,
    escape_specials,
    parse_translate_request,
    request_glossary,
    take_markup,
    translate_answer,
)
from seq2seq.serve.usage import open_usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """Where to listen and how to batch and bound requests."""

    host: str = "127.0.0.1"
    port: int = 8080
    batch: BatchLimits = field(default_factory=BatchLimits)
    request: RequestLimits = field(default_factory=RequestLimits)
    api_keys: Path | None = None  # the keys file of every translating route (keys.py)
    # Where what clients made outlives the process (each feature its own SQLite file in it);
    # None: this process's memory only (tests, library use).
    state_dir: Path | None = None
    redis_url: str | None = None  # shared by replicas: what they count together lives there
    documents: DocumentLimits = field(default_factory=DocumentLimits)  # uploads' size, ttl


def translator_decode(translator: Translator):
    """The batcher's decode function: the run's Translator, with a request's search options."""

    def decode(sources: list[Source], options: DecodeConfig, wanted) -> list[Hypotheses]:
        return translate_sources(translator, sources, wanted, options)

    return decode


def prepare_languages(
    translator: Translator, req: TranslateRequest, glossary: Glossary | None = None
) -> list[Source]:
    """The request's lines encoded for its languages (a batch may mix target languages: each
    source carries its forced first token) with its glossary's terms, each sentence whole (see
    `check_sentence_tokens`); a language the model lacks, or a term that cannot be kept
    (greedy search, too many, unknown pieces), is a 422."""
    try:
        src, tgt = translator.languages(req.source_lang, req.target_lang)
    except UserError as e:
        field = "source_lang" if "source language" in str(e) else "target_lang"
        raise RequestError(422, field, str(e)) from None
    try:
        # Sentences whole, never cut to the model's positions as `translate` does with a
        # warning: a client is told (413) instead of getting the translation of a head.
        return translator.prepare(
            req.lines, req.options, glossary=glossary, src_lang=src, tgt_lang=tgt, truncate=False
        )
    except UserError as e:
        raise RequestError(422, "glossary", str(e)) from None


def term_tokens(sources: list[Source]) -> int:
    """Target-term tokens the sources' sentences must hold: constrained search's extra work."""
    return sum(len(term) for s in sources for terms in s.constraints for term in terms)


def line_tokens(sources: list[Source]) -> list[int]:
    """Each source's (source + target-term) tokens: what sizes the slices of its work."""
    return [s.tokens + term_tokens([s]) for s in sources]


def work_group(sources: list[Source]) -> str:
    """The batcher's group of a request: markup and constrained work are decoded apart from
    plain work, in slices with plain batches between them, so a plain request never waits in
    (or shares the fate of) such a batch, nor behind more than one slice of it."""
    if any(s.marked is not None for s in sources):
        return "markup"
    return "terms" if any(s.constraints for s in sources) else ""


def glossary_refusal(translator: Translator) -> str | None:
    """Why this model takes no glossary, or None: a model whose translations start with a
    forced target-language token (M2M100, NLLB) would get term ids led by that token."""
    tokenizer = translator.tokenizer
    if tokenizer.languages and tokenizer.cfg.target_language == "forced_first":
        return (
            "glossaries are not supported for this model: its translations start with a "
            "forced target-language token (M2M100, NLLB)"
        )
    return None


def special_strings(translator: Translator) -> re.Pattern:
    """Where a string starts that the tokenizer reads as one special token inside text: `</s>`
    and the other special-token strings, a language tag (`>>fr<<`, as Marian reads one), and a
    many-language model's language tokens (`__fr__`, `fra_Latn`)."""
    strings = set(SPECIAL_STRINGS.values()) | set(translator.tokenizer.atomic)
    alternatives = [">>.*?<<", *map(re.escape, sorted(strings, key=len, reverse=True))]
    return re.compile(f"(?=(?:{'|'.join(alternatives)}))", re.DOTALL)


def longest_piece(translator: Translator) -> int:
    """Characters in the longest source piece: the most one token can stand for."""
    pieces = translator.tokenizer.src_vocabulary()
    return max((len(p.lstrip("▁")) for p in pieces), default=1) or 1


def without_paths(info: dict) -> dict:
    """/info without where the run lives: no `run_dir`, the checkpoint's file name only."""
    public = {k: v for k, v in info.items() if k != "run_dir"}
    public["checkpoint"] = Path(info["checkpoint"]).name
    return public


def run_info(run_dir: Path, checkpoint: Path, translator: Translator, cfg: ServeConfig) -> dict:
    """What GET /info answers: the model's name, languages, checkpoint, shape and settings."""
    run_cfg = load_run_config(run_dir)
    summary = run_summary(run_dir)
    d = translator.options
    return {
        "name": Path(run_dir).resolve().name,
        "run_dir": str(Path(run_dir).resolve()),
        "source_language": run_cfg.data.src_lang,
        "target_language": run_cfg.data.tgt_lang,
        "languages": summary["languages"],
        "checkpoint": str(Path(checkpoint).resolve()),
        "steps_trained": summary["steps_trained"],
        "best_bleu": summary["best_bleu"],
        "best_bleu_from": summary["best_bleu_from"],  # final_choice (beam) or validation (greedy)
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
            "max_batch_beam_tokens": cfg.batch.max_beam_tokens,
            "max_slice_beam_tokens": cfg.batch.max_slice_beam_tokens,
        },
        "version": __version__,
    }


class ServerState:
    """What the endpoints share: the batcher once started, and whether shutdown has begun."""

    def __init__(self) -> None:
        self.batcher: Batcher | None = None
        self.draining = False


def create_app(
    translator: Translator,
    info: dict[str, Any],
    cfg: ServeConfig,
    state: ServerState | None = None,
    extra: list[tuple[Translator, dict[str, Any]]] = (),
):
    """The ASGI app: /translate, /health, /ready, /metrics, /info (and FastAPI's /docs), the
    LibreTranslate and DeepL routes and the page; `extra`: more models (and their /info),
    each with its own batcher, requests routed to them by their languages."""
    from fastapi import FastAPI  # the optional `serve` extra, as below

    from seq2seq.serve.metrics import CountRequests, ServerMetrics  # prometheus_client: same

    for model, _ in [(translator, info), *extra]:
        refusal = glossary_refusal(model)
        if refusal is not None and model.glossary is not None:
            raise UserError(f"--glossary: {refusal}")
    keys = KeyCheck(
        read_keys(cfg.api_keys) if cfg.api_keys else None,
        open_usage(cfg.state_dir, cfg.redis_url),
    )
    if keys.required:  # a public server: where its runs live on disk is nobody's business
        info, extra = without_paths(info), [(t, without_paths(i)) for t, i in extra]
    state = state or ServerState()
    metrics = ServerMetrics()
    first = Engine(translator, info, cfg.request, state, metrics)
    others = [Engine(t, i, cfg.request, ServerState(), ServerMetrics()) for t, i in extra]
    models = Models([first, *others])
    documents = DocumentStore(cfg.state_dir, cfg.documents, keys.refund)
    app = FastAPI(
        title="seq2seq",
        version=__version__,
        description=f"Translation server for {info['name']} "
        f"({info['source_language']}→{info['target_language']}).",
        lifespan=_lifespan(models, cfg.batch, state, documents),
    )
    app.add_middleware(CountRequests, metrics=metrics)
    _add_error_handler(app)
    _add_status_routes(app, models.described(), state, metrics)
    _add_model_routes(app, models)
    # LibreTranslate's POST /translate shares the native route's path: that route hands it on.
    libre = add_libretranslate_routes(app, models, keys, documents)
    add_deepl_routes(
        app, models, keys, open_glossaries(cfg.state_dir, cfg.redis_url), documents
    )
    add_page_route(app)
    _add_translate_route(app, models, cfg.request, keys, libre)
    return app


def _lifespan(
    models: "Models", limits: BatchLimits, state: ServerState, documents: DocumentStore
):
    """The batchers' life (one a model): started with the app, drained and stopped when
    uvicorn stops; the documents' workers stopped (between chunks) and their files removed
    before."""

    @asynccontextmanager
    async def lifespan(app):
        for engine in models.engines:
            decode = translator_decode(engine.translator)
            batcher = Batcher(decode, limits, engine.metrics.on_batch).start()
            engine.metrics.watch(batcher)
            engine.state.batcher = batcher
        try:
            yield
        finally:
            # uvicorn comes here after the requests in flight were answered; anything still
            # queued is decoded before the worker ends.
            for engine in models.engines:
                engine.state.draining = True
            state.draining = True
            await asyncio.to_thread(documents.close)
            for engine in models.engines:
                await asyncio.to_thread(engine.state.batcher.stop)

    return lifespan


def _add_error_handler(app) -> None:
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    # Every error answer has its API's shape, FastAPI's own (404, 405) included: DeepL's
    # `{"message"}` under /v2/, the native `{"error", "field"}` elsewhere.
    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        if request.url.path.startswith("/v2/"):
            return JSONResponse({"message": str(exc.detail)}, exc.status_code, headers=exc.headers)
        return JSONResponse(
            {"error": str(exc.detail), "field": None}, exc.status_code, headers=exc.headers
        )


def _add_status_routes(app, info: dict[str, Any], state: ServerState, metrics) -> None:
    from fastapi.responses import JSONResponse, Response

    from seq2seq.serve.metrics import CONTENT_TYPE  # prometheus_client, of the `serve` extra

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
        """The (first) model: name, languages, checkpoint, shape, default decoding, limits;
        `models`: the same for every model loaded."""
        return info

    @app.get("/metrics")
    async def get_metrics():
        """Prometheus text format."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)


def request_checker(translator: Translator, limits: RequestLimits):
    """What a worker thread makes of a parsed request (whichever API's body it came from):
    checked and escaped, its glossary's terms found, its lines split and encoded."""
    piece_chars = longest_piece(translator)
    specials = special_strings(translator)
    refusal = glossary_refusal(translator)

    def check(req: TranslateRequest) -> tuple[TranslateRequest, list[Source]]:
        check_characters(req, limits, piece_chars)
        req = escape_specials(take_markup(req), specials)  # markup parsed once sizes pass
        if req.glossary is not None and refusal is not None:
            raise RequestError(422, "glossary", refusal)
        try:  # a term that cannot be kept (greedy search, too many, unknown pieces) is a 422
            glossary = request_glossary(req, translator.glossary)
        except UserError as e:
            raise RequestError(422, "glossary", str(e)) from None
        sources = prepare_languages(translator, req, glossary)
        check_source_tokens(req, sum(s.tokens for s in sources), limits, term_tokens(sources))
        lengths = [[len(seq) for seq in s.segments] for s in sources]
        check_sentence_tokens(req, lengths, translator.max_src_len)
        if req.marked is not None:  # put back around the aligned words once decoded
            sources = [replace(s, marked=m) for s, m in zip(sources, req.marked)]
        return req, sources

    return check


def native_key(keys: KeyCheck, request, body: bytes) -> tuple[bytes, str | None]:
    """A native body without its `api_key` (the native schema has no such field), and the
    request's key, checked: missing 401, unknown 403, over its requests a minute 429."""
    fields = None
    if b'"api_key"' in body:  # told apart without parsing every body twice
        try:
            fields = json.loads(body)
        except (ValueError, RecursionError):
            pass  # the native checks say what is wrong with it
        if isinstance(fields, dict) and "api_key" in fields:
            key_field = fields.pop("api_key")
            body = json.dumps(fields).encode()
            fields = {"api_key": key_field}
        else:
            fields = None
    key = presented_key(request.headers, fields)
    why = keys.check(key)
    if why == "missing":
        message = "an API key is needed: `Authorization: Bearer KEY`, `X-API-Key` or `api_key`"
        raise Declined(401, "api_key", message, headers={"WWW-Authenticate": "Bearer"})
    if why == "invalid":
        raise RequestError(403, "api_key", "invalid API key")
    if why is not None:
        raise Declined(429, "api_key", f"too many requests for this key ({why})")
    return body, key


def _add_translate_route(
    app, models: "Models", limits: RequestLimits, keys: KeyCheck, libre=None
) -> None:
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response
    from starlette.requests import ClientDisconnect

    prepare = models.native_preparer()

    @app.post("/translate", openapi_extra=native_or_libretranslate(MAX_ALTERNATIVES))
    @refunding(keys)
    async def translate(request: Request):
        """Translate `{"text": …}` or `{"texts": […]}`; answers the translations and scores.
        A LibreTranslate body (`q`, or a form) gets LibreTranslate's answer. With keys, the
        key in `Authorization: Bearer`, `X-API-Key` or the body's `api_key`."""
        start = time.perf_counter()
        try:
            body = await read_body(request, limits.max_bytes, limits.body_timeout_s)
            if libre is not None and libretranslate_asks(request.headers, body):
                return await libre(request, body)
            body, key = await asyncio.to_thread(native_key, keys, request, body)
            engine, req, sources = await asyncio.to_thread(prepare, body)
            over = keys.reserve(key, sum(map(len, req.lines)), request)  # given back unless 200
            if over is not None:
                raise RequestError(429, "api_key", over)
        except RequestError as e:
            return JSONResponse(e.as_json(), e.status, headers=getattr(e, "headers", None))
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is left to read it
        state, metrics = engine.state, engine.metrics
        try:
            results = await decoded(request, sources, req.options, state, metrics, limits, start)
        except ClientGone:
            return Response(status_code=400)  # nobody is left to read it
        except Declined as e:
            return JSONResponse(e.as_json(), e.status, headers=e.headers)
        return translate_answer(req, results)


async def decoded(
    request, sources: list[Source], options, state: ServerState, metrics, limits, start: float
) -> list[Hypotheses]:
    """Checked and encoded sources through the batcher: their hypotheses, or ClientGone, or
    Declined (queue full or shutting down 503, over the batch budget 413, past the request
    timeout 504, a failure 500 whose details go to the log only)."""
    if await request.is_disconnected():
        # Gone while its body was prepared: submitting would let the batcher take it
        # before the disconnect is seen, and decode it for nobody.
        raise ClientGone()
    batcher = state.batcher
    if batcher is None:
        raise _unavailable("the model is not loaded yet", 1)
    tokens = sum(s.tokens for s in sources)
    segments = sum(len(s.segments) for s in sources)  # what the queue's bound counts
    terms, group = term_tokens(sources), work_group(sources)
    try:
        future = batcher.submit(
            sources,
            options,
            tokens,
            segments=segments,
            terms=terms,
            group=group,
            line_tokens=line_tokens(sources),
        )
    except QueueFull as e:
        metrics.rejected.inc()
        raise _unavailable(f"{e}; retry later", e.retry_after_s) from None
    except Stopped:
        raise _unavailable("the server is shutting down", 1) from None
    except OverBudget as e:  # not when serve's limits agree (it checks that they do)
        raise Declined(413, "beam_size", str(e)) from None
    try:
        results = await _outcome(request, future, start + limits.timeout_s)
    except TimeoutError:
        message = f"no translation within {limits.timeout_s:g} s (the request timeout)"
        raise Declined(504, None, message) from None
    except ClientGone:
        raise
    except Exception as e:
        raise _failed(e) from None
    metrics.latency.observe(time.perf_counter() - start)
    return results


class Engine:
    """Translation for the routes that build their own requests (LibreTranslate, DeepL): the
    native route's checks, batcher, limits and metrics, behind one call."""

    def __init__(self, translator: Translator, info: dict, limits, state: ServerState, metrics):
        self.translator, self.info, self.limits = translator, info, limits
        self.state, self.metrics = state, metrics
        self.check = request_checker(translator, limits)
        many = list(translator.tokenizer.languages) or None
        self.pairs = served_pairs(info["source_language"], info["target_language"], many)
        self.glossary_refusal = glossary_refusal(translator)

    async def translate(
        self, request, body: dict, updates: dict | None = None
    ) -> tuple[TranslateRequest, list[Hypotheses]]:
        """A native /translate body (another API's request, restated) parsed, checked and
        decoded, with `updates` to its decoding options: the request and its hypotheses
        (else RequestError, Declined or ClientGone)."""
        start = time.perf_counter()
        req, sources = await asyncio.to_thread(self._prepare, body, updates or {})
        limits = self.limits
        results = await decoded(
            request, sources, req.options, self.state, self.metrics, limits, start
        )
        return req, results

    def _prepare(self, body: dict, updates: dict) -> tuple[TranslateRequest, list[Source]]:
        # A lone surrogate goes back as its JSON escape, which the native checks refuse by name.
        encoded = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        req = parse_translate_request(encoded, self.limits, self.translator.options)
        if updates:
            req = replace(req, options=req.options.model_copy(update=updates))
        return self.check(req)


class Models:
    """The models loaded, each an Engine with its own batcher and metrics. The first answers
    the native route; a request naming a pair only another serves goes to the first of them
    that serves it, one naming a `model` to that model (LibreTranslate's and DeepL's always go
    by their pair)."""

    def __init__(self, engines: list[Engine]):
        self.engines = engines
        self.info, self.limits = engines[0].info, engines[0].limits
        self.pairs = list(dict.fromkeys(pair for e in engines for pair in e.pairs))
        names = [e.info["name"] for e in engines]
        self.names = [n if names.count(n) == 1 else f"{n}-{i + 1}" for i, n in enumerate(names)]

    def route(self, source: str, target: str) -> Engine:
        """The model serving (source, target): the first that does."""
        return next(e for e in self.engines if (source, target) in e.pairs)

    def elsewhere(self, source: str | None, target: str | None) -> Engine | None:
        """The model a native request naming these languages goes to, when the first model
        does not serve them and another does (None: the first, which may refuse them)."""
        if len(self.engines) == 1 or not (source or target):
            return None
        try:
            self.engines[0].translator.languages(source, target)
            return None
        except UserError:
            pass
        for engine in self.engines[1:]:
            info = engine.info
            pair = (source or info["source_language"], target or info["target_language"])
            if pair in engine.pairs:
                return engine
        return None

    def named(self, name: str) -> Engine:
        """The model a request names (as GET /models lists it), else a 422."""
        if name not in self.names:
            listed = ", ".join(self.names)
            raise RequestError(422, "model", f"no model named {name!r} is loaded ({listed})")
        return self.engines[self.names.index(name)]

    def native_preparer(self):
        """What a worker thread makes of a native /translate body: the model it goes to, the
        request parsed with that model's defaults, and its checked, encoded sources."""
        first, limits = self.engines[0], self.limits

        def prepare(body: bytes) -> tuple[Engine, TranslateRequest, list[Source]]:
            req = parse_translate_request(body, limits, first.translator.options)
            if req.model is not None:
                engine = self.named(req.model)
            else:
                engine = self.elsewhere(req.source_lang, req.target_lang) or first
            if engine is not first:  # its own defaults fill what the request leaves out
                req = parse_translate_request(body, limits, engine.translator.options)
            return (engine, *engine.check(req))

        return prepare

    def described(self) -> dict:
        """What GET /info answers: the first model's /info, and `models`, every loaded model's
        /info under the name GET /models gives it."""
        return {
            **self.info,
            "models": [{**e.info, "name": n} for n, e in zip(self.names, self.engines)],
        }

    def listing(self) -> list[dict]:
        """What GET /models answers: each model's name, run, pairs, parameters and memory."""
        return [
            {
                "name": name,
                **({"run_dir": e.info["run_dir"]} if "run_dir" in e.info else {}),
                "pairs": [list(pair) for pair in e.pairs],
                "parameters": e.info["parameters"],
                "memory_mb": round(model_bytes(e.translator) / 2**20, 1),
                "metrics": "/metrics" if i == 0 else f"/metrics/{name}",
            }
            for i, (name, e) in enumerate(zip(self.names, self.engines))
        ]


def model_bytes(translator: Translator) -> int:
    """Bytes the model's parameters and buffers take."""
    tensors = [*translator.model.parameters(), *translator.model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _add_model_routes(app, models: Models) -> None:
    from fastapi.responses import JSONResponse, Response  # the optional `serve` extra

    from seq2seq.serve.metrics import CONTENT_TYPE  # prometheus_client, of the `serve` extra

    @app.get("/models")
    async def get_models():
        """The models loaded: name, run, language pairs, parameters, memory, metrics path."""
        return models.listing()

    @app.get("/metrics/{name}")
    async def model_metrics(name: str):
        """Prometheus text of a model after the first (the first's are at /metrics)."""
        found = [e for n, e in zip(models.names[1:], models.engines[1:]) if n == name]
        if not found:
            return JSONResponse({"error": f"no model named {name!r}", "field": None}, 404)
        return Response(found[0].metrics.render(), media_type=CONTENT_TYPE)


async def _outcome(request, future: JobFuture, deadline: float):
    """The future's result, unless the client goes away (ClientGone) or the deadline
    (`time.perf_counter()`) passes first (TimeoutError). Then, or should this handler be
    cancelled, the request is abandoned: the decoder skips it if still queued, or stops
    decoding its lines within a few steps (the rest of its batch goes on)."""
    result = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait(
            {result, gone},
            timeout=max(0.0, deadline - time.perf_counter()),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        gone.cancel()
        if not result.done():
            future.abandon()
            result.cancel()
    if result in done:
        return result.result()
    raise ClientGone() if gone in done else TimeoutError()


async def _disconnected(request) -> None:
    """Returns when the client has closed the connection (the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _failed(error: Exception) -> Declined:
    """A 500 that tells the client nothing internal (a merged batch's message could name other
    clients' lines): a fixed message and an id that finds the details in the server's log."""
    request_id = uuid.uuid4().hex[:16]
    log.error("translation failed (request %s): %s", request_id, error)
    message = f"translation failed (request {request_id}; see the server log)"
    return Declined(500, None, message, headers={"X-Request-ID": request_id})


def _unavailable(message: str, retry_after_s: float) -> Declined:
    return Declined(
        503, None, message, headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))}
    )
