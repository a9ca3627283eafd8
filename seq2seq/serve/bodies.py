"""The request bodies of the routes that read one, as OpenAPI states them (each route
decorator's `openapi_extra`): the fields the route reads, as JSON and, where its API takes one,
as a form, so that /docs, client generators and API fuzzers know what to send. The routes read
their bodies themselves (their own checks and error shapes); these schemas describe, not
enforce."""

from __future__ import annotations

from seq2seq.serve.forms import FORM, MULTIPART
from seq2seq.serve.schema import TranslateBody

JSON = "application/json"


def _string(description: str, **more) -> dict:
    return {"type": "string", "description": description, **more}


def _strings(description: str) -> dict:
    """A string, or an array of them (in a form: the name given once per string)."""
    array = {"type": "array", "items": {"type": "string"}}
    return {"anyOf": [{"type": "string"}, array], "description": description}


def _object(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required}


def request_body(json_schema: dict, form_schema: dict | None = None, required=True) -> dict:
    """`openapi_extra` for a route reading a body: JSON of `json_schema`, and with
    `form_schema` the same fields URL-encoded or as a multipart form."""
    content = {JSON: {"schema": json_schema}}
    if form_schema is not None:
        content.update({FORM: {"schema": form_schema}, MULTIPART: {"schema": form_schema}})
    return {"requestBody": {"required": required, "content": content}}


# LibreTranslate


def _libretranslate(glossary: dict, max_alternatives: int) -> dict:
    properties = {
        "q": _strings("The text to translate, or several (the answer is then a list)."),
        "source": _string("Source language code (GET /languages), or `auto`."),
        "target": _string("Target language code (GET /languages)."),
        "format": _string("`html`: tags kept around the aligned words.", enum=["text", "html"]),
        "alternatives": {
            "type": "integer",
            "minimum": 0,
            "maximum": max_alternatives,
            "description": "How many other translations to answer beside the first.",
        },
        "api_key": _string("The client's key, on a server with --api-keys."),
        "glossary": glossary,
    }
    return _object(properties, ["q", "source", "target"])


def libretranslate_translate(max_alternatives: int) -> tuple[dict, dict]:
    """LibreTranslate's POST /translate body: as JSON, and as a form (its glossary TSV)."""
    pairs = {
        "type": "array",
        "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        "description": "Term pairs [source term, target term] the translation keeps (ours).",
    }
    tsv = _string("Term pairs, one `source<TAB>target` line each (ours).")
    return _libretranslate(pairs, max_alternatives), _libretranslate(tsv, max_alternatives)


def native_or_libretranslate(max_alternatives: int) -> dict:
    """POST /translate's `openapi_extra`: a native body (with its key's `api_key`), or
    LibreTranslate's, which a form always is."""
    native = TranslateBody.model_json_schema()
    native["properties"]["api_key"] = _string("The client's key, on a server with --api-keys.")
    libre_json, libre_form = libretranslate_translate(max_alternatives)
    return request_body({"anyOf": [native, libre_json]}, libre_form)


def libretranslate_detect() -> dict:
    """LibreTranslate's POST /detect body."""
    fields = _object(
        {
            "q": _strings("The text whose language is wanted (several: one answer for all)."),
            "api_key": _string("The client's key, on a server with --api-keys."),
        },
        ["q"],
    )
    return request_body(fields, fields)


# DeepL

AUTH_KEY = {"auth_key": _string("The client's key (DeepL's old way; the header is the new).")}


def deepl_translate() -> dict:
    """DeepL's POST /v2/translate body."""
    fields = _object(
        {
            "text": _strings("The texts to translate (in a form: `text` once per text)."),
            "target_lang": _string("Target language (GET /v2/languages?type=target)."),
            "source_lang": _string("Source language; detected when left out."),
            "tag_handling": _string("Translate markup, tags kept.", enum=["xml", "html"]),
            "split_sentences": _string(
                "`0`: each text one sentence.", enum=["0", "1", "nonewlines"]
            ),
            "glossary_id": _string("A glossary of the caller's (POST /v2/glossaries)."),
            **AUTH_KEY,
        },
        ["text", "target_lang"],
    )
    return request_body(fields, fields)


def deepl_glossary() -> dict:
    """DeepL's POST /v2/glossaries body."""
    fields = _object(
        {
            "name": _string("The glossary's name."),
            "source_lang": _string("Its source language."),
            "target_lang": _string("Its target language."),
            "entries": _string("Its term pairs: `source<TAB>target` lines, or CSV rows."),
            "entries_format": _string("How `entries` is written.", enum=["tsv", "csv"]),
            **AUTH_KEY,
        },
        ["name", "source_lang", "target_lang", "entries"],
    )
    return request_body(fields, fields)


def deepl_languages() -> dict:
    """DeepL's GET /v2/languages body (optional; the query's `type` is the usual place)."""
    kind = _string("`target`: the target languages.", enum=["source", "target"])
    fields = _object({"type": kind, **AUTH_KEY}, [])
    return request_body(fields, fields, required=False)


def deepl_usage() -> dict:
    """DeepL's /v2/usage body (optional: the key may come as a field)."""
    fields = _object(dict(AUTH_KEY), [])
    return request_body(fields, fields, required=False)
