"""DeepL's API v2 on `seq2seq serve`: POST /v2/translate, GET /v2/languages,
GET /v2/glossary-language-pairs, POST/GET/DELETE /v2/glossaries (entries onto the terminology
path), POST /v2/document with its status and result (documents.py), the
`Authorization: DeepL-Auth-Key …` header, errors `{"message": …}`, 413 above 128 KiB (a
document: above the upload limit). A request is restated as a native /translate body (see
libretranslate.py)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import asyncio

from seq2seq.decode.glossary import with_pairs
from seq2seq.errors import UserError
from seq2seq.serve.bodies import deepl_glossary, deepl_languages, deepl_translate, deepl_usage
from seq2seq.serve.documents import (
    DONE,
    ERROR,
    DocumentLimits,
    DocumentStore,
    Job,
    Languages,
    attachment,
    decoder,
    media_type_of,
    plain,
    read_upload,
)
from seq2seq.serve.forms import (
    ClientGone,
    body_fields,
    form_with_files,
    lone_surrogate,
    read_body,
    sendable,
)
from seq2seq.serve.glossaries import glossary_entries
from seq2seq.serve.glossary_store import GlossaryStore, MemoryGlossaries
from seq2seq.serve.keys import KeyCheck, presented_key, refunding
from seq2seq.serve.langs import detect, language_name
from seq2seq.serve.schema import RequestError

MAX_BODY = 128 * 1024  # DeepL's request size limit
FORM_OVERHEAD = 64 * 1024  # a document upload's bytes besides its file: fields, boundaries
SPLIT = {"0": False, "1": True, "nonewlines": True}
TAGS = {"xml": "xml", "html": "html"}


def _message(status: int, message: str, headers=None):
    from fastapi.responses import JSONResponse  # the optional `serve` extra

    return JSONResponse({"message": sendable(message)}, status, headers=headers)


def refusal(e: RequestError):
    """A refusal in DeepL's shape `{"message": …}`: bad input 400, a body too large 413, a
    bad key 403, a key over its limit or a full queue 429, a timeout or failure 500."""
    headers = getattr(e, "headers", None)
    if e.status in (403, 404, 413, 429, 456):
        return _message(e.status, e.message)
    if e.status == 503:
        return _message(429, f"Too many requests: {e.message}", headers=headers)
    if e.status >= 500:
        return _message(500, e.message, headers=headers)
    return _message(400, e.message)


def authorize(keys: KeyCheck, request, fields: dict | None = None) -> str | None:
    """The request's key, checked: `Authorization: DeepL-Auth-Key KEY` (or the old `auth_key`
    field; see keys.presented_key); a missing or unknown key is a 403, a key over its requests
    a minute a 429."""
    key = presented_key(request.headers, fields)
    why = keys.check(key)
    if why in ("missing", "invalid"):
        raise RequestError(403, "auth_key", "Authorization failure, check auth_key")
    if why is not None:
        raise RequestError(429, "auth_key", f"Too many requests ({why})")
    return key


def served_code(code: str, codes: list[str]) -> str | None:
    """The served code a DeepL code means (`EN-GB` → `en` when only `en` is served)."""
    lower = code.lower()
    for served in codes:
        if served.lower() == lower:
            return served
    base = lower.split("-")[0]
    return next((s for s in codes if s.lower() == base), None)


def deepl_code(code: str) -> str:
    """How DeepL writes a code: upper case."""
    return code.upper()


def _texts(fields: dict) -> list[str]:
    text = fields.get("text")
    if text is None or text == []:
        raise RequestError(400, "text", "Parameter 'text' not specified.")
    texts = [text] if isinstance(text, str) else text
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RequestError(400, "text", "Parameter 'text' must be a list of strings.")
    return texts


def _choice(fields: dict, name: str, choices: dict, default):
    given = fields.get(name)
    if given is None or given == "":
        return default
    if not isinstance(given, str) or given not in choices:
        raise RequestError(400, name, f"Value for '{name}' not supported.")
    return choices[given]


def _languages(models, fields: dict) -> tuple[str | None, str]:
    target = fields.get("target_lang")
    if not target or not isinstance(target, str):
        raise RequestError(400, "target_lang", "Value for 'target_lang' not supported.")
    tgt = served_code(target, sorted({t for _, t in models.pairs}))
    if tgt is None:
        raise RequestError(400, "target_lang", "Value for 'target_lang' not supported.")
    source = fields.get("source_lang")
    if source is None or source == "":
        return None, tgt
    src = (
        served_code(source, sorted({s for s, _ in models.pairs}))
        if isinstance(source, str)
        else None
    )
    if src is None:
        raise RequestError(400, "source_lang", "Value for 'source_lang' not supported.")
    if (src, tgt) not in models.pairs:
        raise RequestError(400, "target_lang", f"Language pair {src} → {tgt} not supported.")
    return src, tgt


def owner(keys: KeyCheck, key: str | None) -> str | None:
    """Whose glossaries a request sees: its key's, or everyone's on a server without keys."""
    return key if keys.required else None


async def _glossary(store: GlossaryStore, who: str | None, fields: dict, source, target: str):
    """The entries of the request's `glossary_id` (the caller's own), or None without one."""
    glossary_id = fields.get("glossary_id")
    if not glossary_id:
        return None
    if source is None:
        raise RequestError(
            400, "source_lang", "Use of a glossary requires the source_lang parameter."
        )
    found = (
        await asyncio.to_thread(store.get, who, glossary_id)
        if isinstance(glossary_id, str)
        else None
    )
    if found is None:
        raise RequestError(404, "glossary_id", "Glossary not found.")
    if (found.source_lang, found.target_lang) != (source, target):
        raise RequestError(
            400, "glossary_id", "Language pair of the glossary does not match the request."
        )
    return [list(pair) for pair in found.entries]


def native_body(engine, fields: dict, source: str, target: str, glossary: list | None):
    """The request restated as a native /translate body (with its glossary's entries), and its
    decoding updates."""
    fmt = _choice(fields, "tag_handling", TAGS, "text")
    split = _choice(fields, "split_sentences", SPLIT, True)
    body: dict = {"texts": _texts(fields), "source_lang": source, "target_lang": target}
    # One best, as LibreTranslate asks without alternatives: DeepL answers one text a line, and
    # a run's decode.nbest > 1 would decode lines whole (n-best lines are never split) and
    # refuse tags, so the text differed from LibreTranslate's for the same glossary.
    body.update(format=fmt, nbest=1)
    if glossary is not None:
        beam = max(engine.translator.options.beam_size, 2)
        body.update(glossary=glossary, beam_size=min(beam, engine.limits.max_beam_size))
    return body, ({} if split else {"split_sentences": False})


def add_routes(
    app,
    models,
    keys: KeyCheck,
    store: GlossaryStore | None = None,
    documents: DocumentStore | None = None,
) -> None:
    """DeepL's v2 routes; glossaries kept in `store` (default: this process's memory),
    documents in `documents` (default: a temporary folder of the system's)."""
    store = MemoryGlossaries() if store is None else store
    if documents is None:
        documents = DocumentStore(None, DocumentLimits(), keys.refund)
    _add_document_routes(app, models, keys, store, documents)
    _add_translate_route(app, models, keys, store)
    _add_language_routes(app, models, keys)
    _add_glossary_routes(app, models, keys, store)
    _add_usage_route(app, models, keys)


def _add_usage_route(app, models, keys: KeyCheck) -> None:
    from fastapi import Request  # the optional `serve` extra

    @app.get("/v2/usage", openapi_extra=deepl_usage())
    @app.post("/v2/usage", openapi_extra=deepl_usage())
    async def usage(request: Request):
        """DeepL: the characters translated for this key since the server started, and its
        character limit (the keys file's `characters=N`, else one no server reaches)."""
        try:
            body = await read_body(request, MAX_BODY, models.limits.body_timeout_s)
            fields = body_fields(body, request.headers.get("content-type", ""))
            key = authorize(keys, request, fields)
        except RequestError as e:
            return refusal(e)
        count, limit = keys.usage(key)
        return {"character_count": count, "character_limit": limit}


def _add_translate_route(app, models, keys: KeyCheck, store: GlossaryStore) -> None:
    from fastapi import Request  # the optional `serve` extra
    from fastapi.responses import Response

    limits = models.limits

    @app.post("/v2/translate", openapi_extra=deepl_translate())
    @refunding(keys)
    async def translate(request: Request):
        """DeepL: `{"translations": [{detected_source_language, text}]}`."""
        try:
            body = await read_body(request, min(MAX_BODY, limits.max_bytes), limits.body_timeout_s)
            fields = body_fields(body, request.headers.get("content-type", ""))
            key = authorize(keys, request, fields)
            source, target = _languages(models, fields)
            texts = _texts(fields)
            over = keys.reserve(key, sum(map(len, texts)), request)  # given back unless a 200
            if over is not None:
                raise RequestError(456, "auth_key", f"Quota exceeded. {over}")
            glossary = await _glossary(store, owner(keys, key), fields, source, target)
            if source is None:
                candidates = sorted({s for s, t in models.pairs if t == target})
                found = await asyncio.to_thread(detect, texts, candidates)
                source = max(found, key=lambda f: f[1])[0]
            engine = models.route(source, target)
            restated, updates = native_body(engine, fields, source, target, glossary)
            _, results = await engine.translate(request, restated, updates)
        except ClientGone:
            return Response(status_code=400)  # nobody is left to read it
        except RequestError as e:
            return refusal(e)
        code = deepl_code(source)
        return {
            "translations": [
                {"detected_source_language": code, "text": hyps[0][0], "billed_characters": len(t)}
                for hyps, t in zip(results, texts)
            ]
        }


def _add_language_routes(app, models, keys: KeyCheck) -> None:
    from fastapi import Request  # the optional `serve` extra

    @app.get("/v2/languages", openapi_extra=deepl_languages())
    async def languages(request: Request, type: str = "source"):  # noqa: A002 (DeepL's name)
        """DeepL: the source (or, with `type=target`, target) languages loaded."""
        try:
            body = await read_body(request, MAX_BODY, models.limits.body_timeout_s)
            fields = body_fields(body, request.headers.get("content-type", ""))
            authorize(keys, request, fields)
            kind = fields.get("type", type)
            if kind not in ("source", "target"):
                raise RequestError(400, "type", "Value for 'type' not supported.")
        except RequestError as e:
            return refusal(e)
        side = 0 if kind == "source" else 1
        codes = sorted({pair[side] for pair in models.pairs})
        extra = {"supports_formality": False} if kind == "target" else {}
        return [{"language": deepl_code(c), "name": language_name(c), **extra} for c in codes]

    @app.get("/v2/glossary-language-pairs")
    async def glossary_pairs(request: Request):
        """DeepL: the language pairs a glossary may have."""
        try:
            authorize(keys, request)
        except RequestError as e:
            return refusal(e)
        pairs = [p for e in models.engines if not e.glossary_refusal for p in e.pairs]
        return {"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs]}


def _new_glossary(models, store: GlossaryStore, key: str | None, fields: dict):
    """A glossary from a POST /v2/glossaries body, stored under `key`; or a RequestError (a
    blocking call: the store may be a file or a server)."""
    for name in ("name", "source_lang", "target_lang", "entries"):
        if not isinstance(fields.get(name), str) or not fields[name]:
            raise RequestError(400, name, f"Missing or invalid argument: {name}")
        if lone_surrogate(fields[name]):  # no text, and what is kept must go out as UTF-8
            raise RequestError(400, name, f"Invalid argument: {name} holds a lone surrogate")
    source, target = _languages(models, fields)
    engine = models.route(source, target)
    if engine.glossary_refusal:
        raise RequestError(400, "glossary", engine.glossary_refusal)
    entries_format = fields.get("entries_format") or "tsv"
    entries = glossary_entries(
        fields["entries"], entries_format, engine.limits.max_glossary_chars
    )
    made = store.add(key, name=fields["name"], source=source, target=target, entries=entries)
    if made is None:
        raise RequestError(456, "glossary", f"Quota exceeded: at most {store.cap} glossaries a key")
    return made


def _add_glossary_routes(app, models, keys: KeyCheck, store: GlossaryStore) -> None:
    from fastapi import Request  # the optional `serve` extra
    from fastapi.responses import JSONResponse, Response

    @app.post("/v2/glossaries", openapi_extra=deepl_glossary())
    async def create(request: Request):
        """DeepL: a new glossary (entries as TSV or CSV); 201 and its description."""
        try:
            body = await read_body(request, MAX_BODY, models.limits.body_timeout_s)
            fields = body_fields(body, request.headers.get("content-type", ""))
            key = owner(keys, authorize(keys, request, fields))
            made = await asyncio.to_thread(_new_glossary, models, store, key, fields)
        except RequestError as e:
            return refusal(e)
        return JSONResponse(made.info(), 201)

    @app.get("/v2/glossaries")
    async def listed(request: Request):
        """DeepL: every glossary of the caller's key."""
        try:
            key = owner(keys, authorize(keys, request))
            mine = await asyncio.to_thread(store.listed, key)
        except RequestError as e:
            return refusal(e)
        return {"glossaries": [g.info() for g in mine]}

    async def found(request, glossary_id: str):
        # Another key's glossary is answered as a missing one: its id tells the caller nothing.
        key = owner(keys, authorize(keys, request))
        glossary = await asyncio.to_thread(store.get, key, glossary_id)
        if glossary is None:
            raise RequestError(404, "glossary_id", "Glossary not found.")
        return glossary

    @app.get("/v2/glossaries/{glossary_id}")
    async def one(request: Request, glossary_id: str):
        """DeepL: one glossary's description."""
        try:
            return (await found(request, glossary_id)).info()
        except RequestError as e:
            return refusal(e)

    @app.get("/v2/glossaries/{glossary_id}/entries")
    async def entries(request: Request, glossary_id: str):
        """DeepL: one glossary's entries, as TSV."""
        try:
            tsv = (await found(request, glossary_id)).tsv()
        except RequestError as e:
            return refusal(e)
        return Response(tsv, media_type="text/tab-separated-values; charset=utf-8")

    @app.delete("/v2/glossaries/{glossary_id}")
    async def delete(request: Request, glossary_id: str):
        """DeepL: the glossary removed; 204."""
        try:
            key = owner(keys, authorize(keys, request))
            if not await asyncio.to_thread(store.remove, key, glossary_id):
                raise RequestError(404, "glossary_id", "Glossary not found.")
        except RequestError as e:
            return refusal(e)
        return Response(status_code=204)


def document_refusal(e: RequestError):
    """A document's refusal in DeepL's shape: a format not translated is a 415."""
    return _message(415, e.message) if e.status == 415 else refusal(e)


def _document_glossary(engine, entries: list | None):
    """The glossary a document decodes with: the server's, with the glossary_id's entries."""
    if entries is None:
        return engine.translator.glossary
    if engine.glossary_refusal:
        raise RequestError(400, "glossary_id", engine.glossary_refusal)
    try:
        return with_pairs(engine.translator.glossary, entries, origin="glossary_id")
    except UserError as e:
        raise RequestError(400, "glossary_id", str(e)) from None


async def _uploaded(request, models, keys: KeyCheck, store, documents: DocumentStore) -> Job:
    """A POST /v2/document read, checked, charged to its key and queued."""
    most = documents.limits.max_upload_bytes + FORM_OVERHEAD
    body = await read_body(request, most, models.limits.body_timeout_s)
    ctype = request.headers.get("content-type", "")
    fields, files = await asyncio.to_thread(form_with_files, body, ctype)
    key = authorize(keys, request, fields)
    source, target = _languages(models, fields)
    if "file" not in files:
        raise RequestError(400, "file", "Parameter 'file' not specified.")
    upload = files["file"]
    given = fields.get("filename")
    filename = given if isinstance(given, str) and given else upload.filename
    read = await asyncio.to_thread(read_upload, filename, upload.data, documents.limits)
    entries = await _glossary(store, owner(keys, key), fields, source, target)
    if source is None:
        candidates = sorted({s for s, t in models.pairs if t == target})
        sample = [plain(t) for t in read.texts[:50]] or [""]
        found = await asyncio.to_thread(detect, sample, candidates)
        source = max(found, key=lambda f: f[1])[0]
    engine = models.route(source, target)
    languages = Languages(source, target, _document_glossary(engine, entries))
    over = keys.reserve(key, read.characters)  # given back by the store should it fail
    if over is not None:
        raise RequestError(456, "auth_key", f"Quota exceeded. {over}")
    translate = decoder(engine, languages, lambda: documents.stopping)
    return await asyncio.to_thread(documents.submit, read, upload.data, filename, key, translate)


def status_of(job: Job, now: float) -> dict:
    """DeepL's document status: `{document_id, status}`, with `seconds_remaining` while it is
    translated, `billed_characters` once done, `error_message` should it fail."""
    out: dict = {"document_id": job.id, "status": job.status}
    remaining = job.seconds_remaining(now)
    if remaining is not None:
        out["seconds_remaining"] = remaining
    if job.status == DONE:
        out["billed_characters"] = job.read.characters
    if job.status == ERROR:
        out["error_message"] = job.error
    return out


def _add_document_routes(app, models, keys: KeyCheck, store, documents: DocumentStore) -> None:
    from fastapi import Request  # the optional `serve` extra
    from fastapi.responses import Response

    @app.post("/v2/document")
    async def upload(request: Request):
        """DeepL: a document to translate (multipart `file`, `target_lang`, `source_lang`,
        `glossary_id`, `filename`); `{document_id, document_key}`."""
        try:
            job = await _uploaded(request, models, keys, store, documents)
        except RequestError as e:
            return document_refusal(e)
        return {"document_id": job.id, "document_key": job.key}

    async def found(request, document_id: str) -> Job:
        body = await read_body(request, MAX_BODY, models.limits.body_timeout_s)
        fields = body_fields(body, request.headers.get("content-type", ""))
        authorize(keys, request, fields)
        secret = fields.get("document_key")
        if not isinstance(secret, str) or not secret:
            raise RequestError(400, "document_key", "Parameter 'document_key' not specified.")
        job = documents.find(document_id, secret)
        if job is None:  # unknown, expired, or not this key: alike to the caller
            raise RequestError(404, "document_id", "Document not found.")
        return job

    @app.post("/v2/document/{document_id}")
    async def status(request: Request, document_id: str):
        """DeepL: a document's status (`document_key` in the body)."""
        try:
            job = await found(request, document_id)
        except RequestError as e:
            return refusal(e)
        return status_of(job, documents.clock())

    @app.post("/v2/document/{document_id}/result")
    async def result(request: Request, document_id: str):
        """DeepL: the translated document (`document_key` in the body), once done."""
        try:
            job = await found(request, document_id)
            if job.status == ERROR:
                raise RequestError(400, "document_id", f"Translation failed: {job.error}")
            data = await asyncio.to_thread(documents.result, job)
        except RequestError as e:
            return refusal(e)
        if job.status != DONE:
            return _message(503, "Document not ready.")
        if data is None:
            return _message(404, "Document not found.")
        media = media_type_of(job.filename)
        return Response(data, media_type=media, headers=attachment(job.filename))
