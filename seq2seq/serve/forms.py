"""What the LibreTranslate and DeepL routes share below the app: their bodies read as fields
(a JSON object, a URL-encoded form or a multipart form), and the refusals the translation
engine answers them with."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import parse_qsl

from seq2seq.serve.schema import RequestError, parse_json_body

FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"


class Declined(RequestError):
    """A request the engine could not answer after its checks: queue full (503), shutting
    down (503), over the batch budget (413), past its timeout (504), a failure (500)."""

    def __init__(self, status: int, field: str | None, message: str, headers=None):
        super().__init__(status, field, message)  # type: ignore[arg-type]
        self.headers = headers or {}


class ClientGone(Exception):
    """The client closed its connection before its answer."""


def sendable(text: str) -> str:
    """`text` as UTF-8 can carry it: a lone surrogate (JSON may spell one: "\\ud800"), which a
    refusal may quote from the request, as its escape, not a failure to encode the answer."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def lone_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate, which is no text (and no UTF-8)."""
    return sendable(text) != text


def media_type(content_type: str) -> str:
    """`application/json; charset=utf-8` → `application/json`."""
    return content_type.split(";", 1)[0].strip().lower()


def is_form(content_type: str) -> bool:
    """Whether a body is a form (URL-encoded or multipart), not JSON."""
    return media_type(content_type) in (FORM, MULTIPART)


def body_fields(body: bytes, content_type: str) -> dict[str, str | list]:
    """The body's fields: a JSON object as it is; a form's fields as strings, a name given
    more than once as a list of them. Not UTF-8, malformed, or not an object: a RequestError
    (400, field `body`)."""
    kind = media_type(content_type)
    if kind == FORM:
        return _form_fields(body)
    if kind == MULTIPART:
        return _multipart_fields(body, content_type)
    if not body.strip():
        return {}
    data = parse_json_body(body)
    if not isinstance(data, dict):
        raise RequestError(400, "body", "the body must be a JSON object")
    return data


def _collect(pairs) -> dict[str, str | list]:
    fields: dict[str, str | list] = {}
    for name, value in pairs:
        if name not in fields:
            fields[name] = value
        else:
            earlier = fields[name]
            fields[name] = [*earlier, value] if isinstance(earlier, list) else [earlier, value]
    return fields


def _form_fields(body: bytes) -> dict[str, str | list]:
    try:
        text = body.decode("ascii")  # a URL-encoded form is ASCII; its escapes spell UTF-8
        pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise RequestError(400, "body", "the form is not URL-encoded UTF-8") from None
    except ValueError as e:
        raise RequestError(400, "body", f"malformed form: {e}") from None
    return _collect(pairs)


def _multipart_parts(body: bytes, content_type: str):
    """A multipart form's parts: (name, file name or None, bytes) each."""
    # The standard library's MIME parser: multipart forms are rare here (browsers' FormData,
    # document uploads), and python-multipart would be one more dependency for them.
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise RequestError(400, "body", "malformed multipart form")
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            yield str(name), part.get_filename(), part.get_payload(decode=True) or b""


def _multipart_fields(body: bytes, content_type: str) -> dict[str, str | list]:
    return form_with_files(body, content_type)[0]


@dataclass(frozen=True)
class Upload:
    """A file sent in a multipart form: its file name (as the client gave it) and bytes."""

    filename: str
    data: bytes


def form_with_files(body: bytes, content_type: str) -> tuple[dict[str, str | list], dict]:
    """The body's fields (as `body_fields` reads them) and, for a multipart form, its files:
    field name → Upload (the first file of each name)."""
    if media_type(content_type) != MULTIPART:
        return body_fields(body, content_type), {}
    pairs, files = [], {}
    for name, filename, payload in _multipart_parts(body, content_type):
        if filename is not None:
            files.setdefault(name, Upload(str(filename), payload))
            continue
        try:
            pairs.append((name, payload.decode("utf-8")))
        except UnicodeDecodeError:
            raise RequestError(400, "body", f"form field {name!r} is not UTF-8") from None
    return _collect(pairs), files


async def read_body(request, limit: int, timeout_s: float) -> bytes:
    """The body, refused as soon as it is known to be over the limit, or once it has taken
    longer than `timeout_s` to arrive (a client that stops half-way must not hold the handler,
    and with it a shutdown, forever)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise RequestError(413, "body", f"request body over {limit} bytes")
    try:
        # wait_for, not asyncio.timeout (Python 3.11+): the package supports 3.10, where
        # asyncio's TimeoutError is not yet the builtin one.
        return await asyncio.wait_for(_body_chunks(request, limit), timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(
            408, "body", f"request body not received within {timeout_s:g} s"
        ) from None


async def _body_chunks(request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body", f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
