"""LibreTranslate's API (v1.9) on `seq2seq serve`, field for field: POST /translate (a body
with `q`, or any form, which the native route hands on), GET /languages, POST /detect,
GET /frontend/settings, POST /translate_file and GET /download_file/<name> (documents.py);
its errors `{"error": …}` with its codes (400, 403, 429, 500).

A request is restated as a native /translate body and goes through the native checks,
batcher, limits and metrics; `glossary` (term pairs, or TSV lines in a form) is ours."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import asyncio
import json

from seq2seq.serve.bodies import libretranslate_detect
from seq2seq.serve.documents import (
    DONE,
    DocumentLimits,
    DocumentStore,
    Languages,
    attachment,
    decoder,
    extensions,
    media_type_of,
    plain,
    read_upload,
)
from seq2seq.serve.forms import (
    ClientGone,
    body_fields,
    form_with_files,
    is_form,
    read_body,
    sendable,
)
from seq2seq.serve.glossaries import read_entries
from seq2seq.serve.keys import KeyCheck, presented_key, refunding
from seq2seq.serve.langs import detect, language_list, language_name
from seq2seq.serve.schema import RequestError

MAX_ALTERNATIVES = 3  # LibreTranslate's default --alternatives-limit
NEED_KEY = "Please contact the server operator to get an API key"
FORM_OVERHEAD = 64 * 1024  # a multipart body's bytes besides its file: fields, boundaries


# Keys of LibreTranslate's body that the native schema forbids: a body with one is not native.
# (`api_key` alone is not one: the native route takes a key in the body too.)
OWN_KEYS = ("q", "source", "target", "alternatives")


def asks(headers, body: bytes) -> bool:
    """Whether a POST /translate is LibreTranslate's: a form, or a JSON object with one of its
    own keys (`q`, `source`, …), which the native schema refuses, so no native request is
    taken."""
    if is_form(headers.get("content-type", "")):
        return True
    if not any(f'"{key}"'.encode() in body for key in OWN_KEYS):
        return False  # a native body, told apart without parsing it twice
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and any(key in data for key in OWN_KEYS)


def _error(status: int, message: str, headers=None):
    from fastapi.responses import JSONResponse  # the optional `serve` extra

    return JSONResponse({"error": sendable(message)}, status, headers=headers)


def refusal(e: RequestError):
    """A native refusal in LibreTranslate's shape: bad input is its 400; a full queue is its
    429 (`Slowdown: …`), a timeout or a failure its 500 (never the client's text)."""
    headers = getattr(e, "headers", None)
    if e.status in (403, 429):
        return _error(e.status, e.message)
    if e.status == 503:
        return _error(429, f"Slowdown: {e.message}", headers)
    if e.status >= 500:
        return _error(500, f"Cannot translate text: {e.message}", headers)
    if e.message.startswith("Invalid request") or e.message.endswith("is not supported"):
        return _error(400, e.message)
    return _error(400, f"Invalid request: {e.message}")


def authorize(keys: KeyCheck, request, fields: dict) -> str | None:
    """The request's key (`api_key`, or a header: see keys.presented_key), checked: a missing
    or unknown key is a 403; a key over its requests a minute is a 429."""
    key = presented_key(request.headers, fields)
    why = keys.check(key)
    if why == "missing":
        raise RequestError(403, "api_key", NEED_KEY)
    if why == "invalid":
        raise RequestError(403, "api_key", "Invalid API key")
    if why is not None:
        raise RequestError(429, "api_key", f"Slowdown: {why}")
    return key


def _texts(fields: dict) -> tuple[list[str], bool]:
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise RequestError(400, "q", "Invalid request: missing q parameter")
    if isinstance(q, str):
        return [q], True
    if isinstance(q, list) and all(isinstance(t, str) for t in q):
        return q, False
    raise RequestError(400, "q", "Invalid request: q must be a string or an array of strings")


def _required(fields: dict, name: str) -> str:
    value = fields.get(name)
    if not value:
        raise RequestError(400, name, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise RequestError(400, name, f"Invalid request: {name} must be a string")
    return value


def _alternatives(fields: dict) -> int:
    given = fields.get("alternatives", 0)
    try:
        count = max(0, int(given))
    except (TypeError, ValueError, OverflowError):
        raise RequestError(
            400, "alternatives", "Invalid request: alternatives parameter is not a number"
        ) from None
    if count > MAX_ALTERNATIVES:
        raise RequestError(
            400,
            "alternatives",
            f"Invalid request: alternatives parameter must be <= {MAX_ALTERNATIVES}",
        )
    return count


def _glossary(fields: dict) -> list | None:
    given = fields.get("glossary")
    if given is None or given == "":
        return None
    if isinstance(given, str):  # a form's field: TSV lines
        return [list(pair) for pair in read_entries(given, "tsv")]
    return given  # the native checks refuse what is not a list of pairs


def language_pair(models, source: str, target: str) -> None:
    """An unknown language, or a pair no loaded model serves, is a 400 naming it."""
    sources = {s for s, _ in models.pairs}
    targets = {t for _, t in models.pairs}
    if source != "auto" and source not in sources:
        raise RequestError(400, "source", f"{source} is not supported")
    if target not in targets:
        raise RequestError(400, "target", f"{target} is not supported")
    if source != "auto" and (source, target) not in models.pairs:
        raise RequestError(400, "target", f"{source} → {target} is not supported")


def detected(texts: list[str], candidates: list[str]) -> tuple[str, float]:
    """One language for all the texts (as LibreTranslate detects a batch): the one of most
    summed probability over the non-blank texts, with its mean probability (0–100)."""
    found = detect([t for t in texts if t.strip()] or texts, candidates)
    totals: dict[str, float] = {}
    for code, p in found:
        totals[code] = totals.get(code, 0.0) + p
    best = max(totals, key=lambda c: totals[c])
    return best, round(100.0 * totals[best] / len(found), 1)


def native_body(engine, fields: dict, texts: list[str], single: bool, source: str) -> dict:
    """The request restated as a native /translate body."""
    target = fields["target"]
    fmt = fields.get("format") or "text"
    if fmt not in ("text", "html"):
        raise RequestError(400, "format", f"{fmt} format is not supported")
    nbest = _alternatives(fields) + 1
    glossary = _glossary(fields)
    if nbest > 1 and fmt == "html":
        raise RequestError(400, "alternatives", "Invalid request: alternatives need format text")
    beam = max(engine.translator.options.beam_size, nbest, 2 if glossary else 1)
    body: dict = {"text": texts[0]} if single else {"texts": texts}
    body.update(source_lang=source, target_lang=target, format=fmt, nbest=nbest)
    body["beam_size"] = min(beam, engine.limits.max_beam_size)
    if glossary is not None:
        body["glossary"] = glossary
    return body


def answer(req, results, single: bool, language: tuple[str, float] | None) -> dict:
    """LibreTranslate's answer: `translatedText`, with `detectedLanguage` when the source was
    `auto` and `alternatives` when asked for, each a list when `q` was."""
    texts = [hyps[0][0] for hyps in results]
    others = [[t for t, _ in hyps[1:]] for hyps in results]
    out: dict = {"translatedText": texts[0] if single else texts}
    if language is not None:
        found = {"confidence": language[1], "language": language[0]}
        out["detectedLanguage"] = found if single else [found] * len(texts)
    if req.options.nbest > 1:
        out["alternatives"] = others[0] if single else others
    return out


def add_routes(app, models, keys: KeyCheck, documents: DocumentStore | None = None):
    """GET /languages, POST /detect, GET /frontend/settings, POST /translate_file and
    GET /download_file/<name> (documents kept in `documents`, default: a temporary folder of
    the system's); returns the handler the native POST /translate hands LibreTranslate's
    bodies to."""
    if documents is None:
        documents = DocumentStore(None, DocumentLimits(), keys.refund)
    _add_info_routes(app, models, keys)
    _add_detect_route(app, models, keys)
    _add_file_routes(app, models, keys, documents)
    return translate_handler(models, keys)


def _add_info_routes(app, models, keys: KeyCheck) -> None:
    @app.get("/languages")
    async def languages():
        """LibreTranslate: `[{code, name, targets}]`, the pairs loaded (a body is ignored)."""
        return language_list(models.pairs)

    @app.get("/frontend/settings")
    async def frontend_settings():
        """LibreTranslate's settings for its web page and clients."""
        target = models.info["target_language"]
        return {
            "charLimit": models.limits.max_bytes,
            "frontendTimeout": 500,
            "apiKeys": keys.required,
            "keyRequired": keys.required,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": extensions(),
            "language": {
                "source": {"code": "auto", "name": "Auto Detect"},
                "target": {"code": target, "name": language_name(target)},
            },
        }


def _add_detect_route(app, models, keys: KeyCheck) -> None:
    from fastapi import Request  # the optional `serve` extra

    limits = models.limits
    sources = sorted({s for s, _ in models.pairs})

    @app.post("/detect", openapi_extra=libretranslate_detect())
    async def detect_route(request: Request):
        """LibreTranslate: the language of `q`, `[{confidence, language}]`."""
        try:
            body = await read_body(request, limits.max_bytes, limits.body_timeout_s)
            fields = body_fields(body, request.headers.get("content-type", ""))
            authorize(keys, request, fields)
            texts, _ = _texts(fields)
            code, confidence = await asyncio.to_thread(detected, texts, sources)
        except RequestError as e:
            return refusal(e)
        return [{"confidence": confidence, "language": code}]


def translate_handler(models, keys: KeyCheck):
    """LibreTranslate's POST /translate, given the body the native route has read: its
    characters reserved for its key before decoding, given back when it is not translated."""
    from fastapi.responses import JSONResponse, Response  # the optional `serve` extra

    @refunding(keys)
    async def translate(request, body: bytes):
        try:
            fields = body_fields(body, request.headers.get("content-type", ""))
            key = authorize(keys, request, fields)
            texts, single = _texts(fields)
            over = keys.reserve(key, sum(map(len, texts)), request)
            if over is not None:
                raise RequestError(429, "api_key", f"Slowdown: {over}")
            source, target = _required(fields, "source"), _required(fields, "target")
            language_pair(models, source, target)
            language = None
            if source == "auto":
                candidates = sorted({s for s, t in models.pairs if t == target})
                language = await asyncio.to_thread(detected, texts, candidates)
                source = language[0]
            engine = models.route(source, target)
            restated = native_body(engine, fields, texts, single, source)
            req, results = await engine.translate(request, restated)
        except ClientGone:
            return Response(status_code=400)  # nobody is left to read it
        except RequestError as e:
            return refusal(e)
        return JSONResponse(answer(req, results, single, language))

    return translate


def file_refusal(e: RequestError):
    """A document's refusal in LibreTranslate's shape: a format it does not translate is its
    400 (`Invalid request: file format not supported…`), a file too large a 413."""
    if e.status == 413:
        return _error(413, f"Invalid request: {e.message}")
    if e.status == 415:
        return _error(400, f"Invalid request: file format not supported: {e.message}")
    return refusal(e)


async def _document_source(models, source: str, target: str, texts: list[str]) -> str:
    """The source language of a document: `source`, or, when `auto`, the one detected from its
    first segments."""
    if source != "auto":
        return source
    candidates = sorted({s for s, t in models.pairs if t == target})
    sample = [plain(t) for t in texts[:50]] or [""]
    return (await asyncio.to_thread(detected, sample, candidates))[0]


def _add_file_routes(app, models, keys: KeyCheck, documents: DocumentStore) -> None:
    from fastapi import Request  # the optional `serve` extra
    from fastapi.responses import JSONResponse, Response

    limits, most = models.limits, documents.limits.max_upload_bytes + FORM_OVERHEAD

    @app.post("/translate_file")
    async def translate_file(request: Request):
        """LibreTranslate: translate a document (multipart `file`, `source`, `target`,
        `api_key`); `{"translatedFileUrl": …/download_file/<name>}` once it is done."""
        try:
            body = await read_body(request, most, limits.body_timeout_s)
            ctype = request.headers.get("content-type", "")
            fields, files = await asyncio.to_thread(form_with_files, body, ctype)
            key = authorize(keys, request, fields)
            if "file" not in files:
                raise RequestError(400, "file", "Invalid request: missing file parameter")
            source, target = _required(fields, "source"), _required(fields, "target")
            language_pair(models, source, target)
            upload = files["file"]
            read = await asyncio.to_thread(
                read_upload, upload.filename, upload.data, documents.limits
            )
            source = await _document_source(models, source, target, read.texts)
            engine = models.route(source, target)
            over = keys.reserve(key, read.characters)  # refunded by the store should it fail
            if over is not None:
                raise RequestError(429, "api_key", f"Slowdown: {over}")
            translate = decoder(engine, Languages(source, target), lambda: documents.stopping)
            job = await asyncio.to_thread(
                documents.submit, read, upload.data, upload.filename, key, translate
            )
            await asyncio.wrap_future(job.future)
        except RequestError as e:
            return file_refusal(e)
        if job.status != DONE:
            return _error(500, f"Cannot translate file: {job.error}")
        url = f"{str(request.base_url).rstrip('/')}/download_file/{job.name}"
        return JSONResponse({"translatedFileUrl": url})

    @app.get("/download_file/{name}")
    async def download_file(name: str):
        """LibreTranslate: a translated document, until it expires (`--document-ttl`)."""
        job = documents.named(name)
        data = None if job is None else await asyncio.to_thread(documents.result, job)
        if data is None:
            return _error(404, "Invalid filename: no such file, or it has expired")
        return Response(
            data, media_type=media_type_of(job.filename), headers=attachment(job.filename)
        )
