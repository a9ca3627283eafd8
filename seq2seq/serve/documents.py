"""Documents translated over the APIs (LibreTranslate's /translate_file, DeepL's /v2/document).

An upload is read at once (a bad file is refused before anything is kept), then kept in a
temporary folder of the state directory under an id and a secret key; a worker thread reads it
again and sends its segments through the model's batcher as the named group `document`, which
the batcher decodes in slices with plain requests between them, so a document never starves
interactive requests. The translated file is written whole (or not at all) and removed
`ttl_s` after it is done; DeepL's clients poll its status (queued, translating, done, error).
"""

from __future__ import annotations

import hmac
import logging
import mimetypes
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from seq2seq.config import DecodeConfig
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.segments import Source
from seq2seq.document.formats import FORMATS, REFUSED, format_of, reader, supported
from seq2seq.document.translate import Report, decoding_order, plain, ready_segments
from seq2seq.errors import UserError
from seq2seq.files import atomic_write
from seq2seq.serve.batcher import Batcher, Hypotheses, QueueFull, Stopped
from seq2seq.serve.schema import RequestError
from seq2seq.serve.usage import state_file

log = logging.getLogger(__name__)

GROUP = "document"  # the batcher's named group: decoded in slices, plain work between them
CHUNK = 64  # segments prepared and submitted together
SWEEP = 32  # expired documents removed at most per touch: a touch stays cheap
QUEUED, TRANSLATING, DONE, ERROR = "queued", "translating", "done", "error"


@dataclass(frozen=True)
class DocumentLimits:
    """How large an upload may be, and how long a translated file is kept."""

    max_upload_bytes: int = 10 * 2**20
    ttl_s: float = 3600.0


def extensions() -> list[str]:
    """The file extensions documents may have, with their leading dot (as LibreTranslate lists
    them)."""
    return [ext for _, exts in FORMATS.values() for ext in exts]


def safe_name(filename: str) -> str:
    """A client's file name as one harmless path component: its last part, odd characters as
    `_`, no leading dot, at most 100 characters (its extension kept)."""
    base = re.split(r"[\\/]", filename)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".") or "document"
    stem, dot, ext = cleaned.rpartition(".")
    return cleaned[:100] if not dot or len(ext) > 10 else f"{stem[: 99 - len(ext)]}.{ext}"


def media_type_of(filename: str) -> str:
    """The media type a file name's extension says, else application/octet-stream."""
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def attachment(filename: str) -> dict[str, str]:
    """The header that makes a client save a download under `filename` (a `safe_name`)."""
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


@dataclass(frozen=True)
class Read:
    """An upload read: its format, its different segments with words, and their characters
    (markup aside): what a key is charged."""

    fmt: str
    texts: list[str]
    characters: int


def read_upload(filename: str, data: bytes, limits: DocumentLimits) -> Read:
    """An upload read by the document package (a blocking call): over the size limit it is a
    RequestError 413; a format not translated a 415 naming those that are; a corrupt,
    encrypted or hostile file (a zip bomb, XML entities) a 400."""
    if len(data) > limits.max_upload_bytes:
        mb = limits.max_upload_bytes / 2**20
        raise RequestError(413, "file", f"the file is over the upload limit ({mb:g} MB)")
    ext = Path(safe_name(filename)).suffix.lower()
    if ext not in extensions():
        what = f"{REFUSED[ext]} files ({ext}) are" if ext in REFUSED else f"{ext} files are"
        what = what if ext else "files without an extension are"
        message = f"{what} not translated; supported formats: {supported()}"
        raise RequestError(415, "file", message)
    fmt = format_of(Path(safe_name(filename)))
    try:
        document = reader(fmt)(data)
    except UserError as e:
        raise RequestError(400, "file", str(e)) from None
    except Exception as e:  # noqa: BLE001  a reader's own bug must not become a 500 with a trace
        log.warning("a %s upload could not be read: %s", fmt, e)
        raise RequestError(400, "file", f"the file cannot be read as {fmt}") from None
    texts = decoding_order(document.segments)
    return Read(fmt, texts, sum(len(plain(s)) for s in texts))


@dataclass(eq=False)
class Job:
    """One document: its handle (id, secret key, download name), what it costs, its status."""

    id: str
    key: str
    name: str  # the download name: `<token>.<file name>`, unguessable
    filename: str  # the file name it is downloaded as
    read: Read
    owner: str | None  # the API key charged, refunded should it fail
    status: str = QUEUED
    error: str | None = None
    done: int = 0  # segments translated so far, of len(read.texts)
    started: float | None = None
    finished: float | None = None
    result: Path | None = None
    future: Future = field(default_factory=Future)  # its Job once done or failed

    def seconds_remaining(self, now: float) -> int | None:
        """A guess at the seconds left from the pace so far (None: no pace yet)."""
        if self.status != TRANSLATING or not self.done or self.started is None:
            return None
        pace = (now - self.started) / self.done
        return max(0, round(pace * (len(self.read.texts) - self.done)))


class DocumentStore:
    """The documents of one server: uploads and results in a temporary folder (of the state
    directory, else the system's), translated on worker threads, removed `ttl_s` after they
    are done or when the server stops."""

    def __init__(
        self,
        state_dir: Path | None,
        limits: DocumentLimits,
        refund: Callable[[str | None, int], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.limits, self.refund, self.clock = limits, refund, clock
        parent = None
        if state_dir is not None:
            parent = state_file(state_dir, "documents")
            parent.mkdir(exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="documents-", dir=parent))
        self.jobs: dict[str, Job] = {}
        self.names: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.stopping = False
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seq2seq-documents")

    def submit(self, read: Read, data: bytes, filename: str, owner: str | None, translate) -> Job:
        """Keep an upload and queue its translation: `translate(job, data) -> bytes` runs on a
        worker thread (a blocking call: the upload is written first). `owner`'s characters,
        reserved by the caller, are given back should it fail."""
        self.sweep()
        token = secrets.token_hex(16)
        name = safe_name(filename)
        job = Job(token.upper(), secrets.token_hex(32), f"{token}.{name}", name, read, owner)
        upload = self.root / f"{token}.upload"
        try:
            atomic_write(upload, lambda tmp: Path(tmp).write_bytes(data))
        except OSError as e:
            log.error("cannot keep an upload in %s: %s", self.root, e)
            self.refund(owner, read.characters)
            raise RequestError(500, "file", "cannot keep the upload (see the server log)") from None
        with self._lock:
            self.jobs[job.id] = self.names[job.name] = job
        self._pool.submit(self._run, job, upload, translate)
        return job

    def _run(self, job: Job, upload: Path, translate) -> None:
        job.status, job.started = TRANSLATING, self.clock()
        try:
            translated = translate(job, upload.read_bytes())
            result = self.root / job.name
            atomic_write(result, lambda tmp: Path(tmp).write_bytes(translated))
            job.result, job.status = result, DONE
        except Exception as e:  # noqa: BLE001  the client hears of it through the status
            job.status = ERROR
            job.error = str(e) if isinstance(e, (UserError, RequestError)) else "translation failed"
            if not isinstance(e, (UserError, RequestError)):
                log.exception("translating a document failed")
            self.refund(job.owner, job.read.characters)
        finally:
            job.finished = self.clock()
            upload.unlink(missing_ok=True)
            job.future.set_result(job)

    def find(self, document_id: str, key: str) -> Job | None:
        """The document of this id if `key` is its secret key, and it has not expired."""
        self.sweep()
        job = self.jobs.get(document_id)
        if job is None or not hmac.compare_digest(job.key.encode(), str(key).encode()):
            return None
        return job

    def named(self, name: str) -> Job | None:
        """The done document of this download name, if it has not expired."""
        self.sweep()
        job = self.names.get(name)
        return job if job is not None and job.status == DONE else None

    def result(self, job: Job) -> bytes | None:
        """The translated file's bytes (a blocking call); None once it is gone."""
        try:
            return job.result.read_bytes() if job.result is not None else None
        except OSError:
            return None

    def sweep(self) -> None:
        """Forget the documents done longer than `ttl_s` ago, and remove their files (a few at
        a time)."""
        now = self.clock()
        with self._lock:
            old = [
                j
                for j in self.jobs.values()
                if j.finished is not None and now - j.finished > self.limits.ttl_s
            ][:SWEEP]
            for job in old:
                del self.jobs[job.id], self.names[job.name]
        for job in old:
            if job.result is not None:
                job.result.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop translating (between chunks), wait for the workers, remove every file (a
        blocking call: when the server stops)."""
        self.stopping = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        for job in list(self.jobs.values()):
            if not job.future.done():  # never started: its characters go back
                job.status, job.error = ERROR, "the server stopped"
                self.refund(job.owner, job.read.characters)
                job.future.set_result(job)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class Languages:
    """What a document's segments are prepared with: languages and glossary."""

    src_lang: str | None = None
    tgt_lang: str | None = None
    glossary: Glossary | None = None


def decoder(engine, languages: Languages, stopping: Callable[[], bool]):
    """`translate(job, data) -> bytes` for DocumentStore.submit: the document read again, its
    segments decoded through the engine's batcher in chunks, the file rebuilt. A segment that
    cannot be translated keeps its source text."""
    translator = engine.translator
    options = translator.options
    if languages.glossary is not None:  # terms are kept by beam search only
        beam = min(max(options.beam_size, 2), engine.limits.max_beam_size)
        options = options.model_copy(update={"beam_size": beam})

    def translate(job: Job, data: bytes) -> bytes:
        document = reader(job.read.fmt)(data)
        done: dict[str, str] = {}
        for at in range(0, len(job.read.texts), CHUNK):
            if stopping():
                raise UserError("the server stopped before the document was translated")
            chunk = job.read.texts[at : at + CHUNK]
            done.update(_chunk(engine, chunk, languages, options))
            job.done = at + len(chunk)
        asked = (languages.src_lang, languages.tgt_lang)
        document.target_lang = engine.translator.languages(*asked)[1]
        return document.rebuild([done.get(s, s) for s in document.segments])

    return translate


def _chunk(engine, chunk: list[str], languages: Languages, options) -> dict[str, str]:
    """Translations of the chunk's segments that can be translated."""
    found = ready_segments(
        engine.translator,
        chunk,
        Report(),
        options,
        glossary=languages.glossary,
        src_lang=languages.src_lang,
        tgt_lang=languages.tgt_lang,
    )
    ready = [(segment, replace(source, marked=marked)) for segment, marked, source in found]
    batcher = engine.state.batcher
    if batcher is None:
        raise UserError("the model is not loaded yet")
    out: dict[str, str] = {}
    for part in _parts(ready, options.beam_size, batcher.limits.max_beam_tokens // 2):
        out.update(_decoded_or_one_by_one(batcher, part, options))
    return out


def _parts(ready: list[tuple[str, Source]], beam: int, budget: int) -> list[list]:
    """The segments in submissions of at most `budget` (source + term tokens) × beam each."""
    parts: list[list] = [[]]
    cost = 0
    for item in ready:
        more = _line_tokens(item[1]) * beam
        if parts[-1] and cost + more > budget:
            parts.append([])
            cost = 0
        parts[-1].append(item)
        cost += more
    return [p for p in parts if p]


def _line_tokens(source: Source) -> int:
    """(Source + target-term) tokens of a source: what sizes its slices."""
    return source.tokens + sum(len(term) for terms in source.constraints for term in terms)


def _decoded_or_one_by_one(batcher: Batcher, ready: list, options) -> dict[str, str]:
    try:
        return _decoded(batcher, ready, options)
    except Stopped:
        raise UserError("the server stopped before the document was translated") from None
    except Exception as e:  # noqa: BLE001  one bad segment must not sink the rest: one by one
        log.info("%d document segments failed together (%s); one by one", len(ready), e)
    out: dict[str, str] = {}
    for item in ready:
        try:
            out.update(_decoded(batcher, [item], options))
        except Stopped:
            raise UserError("the server stopped before the document was translated") from None
        except Exception as e:  # noqa: BLE001
            log.warning("a document segment kept its source text: %s", e)
    return out


def _decoded(batcher: Batcher, ready: list[tuple[str, Source]], options: DecodeConfig):
    """The segments' translations through the batcher's `document` group; a full queue is
    waited out (a document can wait, a person at a page should not)."""
    if not ready:
        return {}
    sources = [s for _, s in ready]
    line_tokens = [_line_tokens(s) for s in sources]
    tokens = sum(s.tokens for s in sources)
    while True:
        try:
            future = batcher.submit(
                sources,
                options,
                tokens,
                segments=sum(len(s.segments) for s in sources),
                terms=sum(line_tokens) - tokens,
                group=GROUP,
                line_tokens=line_tokens,
            )
            break
        except QueueFull as e:
            time.sleep(min(e.retry_after_s, 1.0))
    results: list[Hypotheses] = future.result()
    return {segment: hyps[0][0] for (segment, _), hyps in zip(ready, results) if hyps}
