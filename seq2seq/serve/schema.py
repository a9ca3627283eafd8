"""`POST /translate`: its body parsed and checked (or one error naming the field at fault), and
its answer."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from seq2seq.config import DecodeConfig
from seq2seq.decode.glossary import Glossary, with_pairs
from seq2seq.decode.markup import MalformedMarkup, parse
from seq2seq.errors import UserError
from seq2seq.serve.batcher import Hypotheses

MAX_LENGTH_PENALTY = 5.0


class RequestError(Exception):
    """A request the server refuses: HTTP status, the field at fault and a message."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message

    def as_json(self) -> dict:
        """The error body every 4xx answer has."""
        return {"error": self.message, "field": self.field}


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on one request, so that no client can make the server do unbounded work."""

    max_lines: int = 256
    max_bytes: int = 1_000_000
    max_beam_size: int = 16
    max_tokens: int = 16_384  # source tokens, once the texts are split into sentences
    max_beam_tokens: int = 65_536  # (source + term tokens) × beam size: bounds its compute
    timeout_s: float = 60.0  # from arrival to answer; past it, 504 and the request is dropped
    body_timeout_s: float = 30.0  # to receive the whole body; past it, 408
    max_glossary_pairs: int = 1000  # term pairs in one request's glossary
    # Characters of its terms, sources and targets: a glossary's index takes some 170 bytes
    # for each character of a term in Chinese or Japanese.
    max_glossary_chars: int = 20_000


class TranslateBody(BaseModel):
    """`{"text": …}` or `{"texts": […]}`, with optional decoding settings."""

    # Strict: "4" is not a beam size and true is not 1; unknown keys are typos worth an error.
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str | None = Field(None, description="One text to translate.")
    texts: list[str] | None = Field(
        None, description="Several texts, translated in order (blank ones give empty results)."
    )
    beam_size: int | None = Field(None, description="Beam width; 1 is greedy (run's default).")
    nbest: int | None = Field(None, description="Hypotheses per text, ≤ beam_size (default 1).")
    length_penalty: float | None = Field(
        None, description=f"GNMT α, 0 to {MAX_LENGTH_PENALTY} (run's default)."
    )
    glossary: list[list[str]] | None = Field(
        None,
        description="Term pairs [source term, target term]: where a source term occurs (whole "
        "words, any case), its target term appears once in the translation; added to the "
        "server's --glossary (a source term in both takes this target). Needs beam_size ≥ 2.",
    )
    source_lang: str | None = Field(
        None, description="Source language of a many-language model (run's default)."
    )
    target_lang: str | None = Field(
        None, description="Target language of a many-language model (run's default)."
    )
    model: str | None = Field(
        None,
        description="The loaded model to translate with, by its name in GET /models (default: "
        "the first that serves the request's languages).",
    )
    format: Literal["text", "html", "xml"] | None = Field(
        None,
        description="`html` or `xml`: the texts carry inline tags and placeholders ({name}, %s), "
        "taken out before translation and put back around the aligned words (default: text).",
    )


@dataclass(frozen=True)
class TranslateRequest:
    """A checked request: its lines, whether it came as one `text`, and its search settings."""

    lines: list[str]
    single: bool
    options: DecodeConfig
    glossary: list[tuple[str, str]] | None = None  # the request's own term pairs, checked
    source_lang: str | None = None
    target_lang: str | None = None
    # With format html or xml: each line's markup, taken out of `lines` (which hold the text).
    marked: list | None = None
    model: str | None = None  # the loaded model the client named
    # html or xml while `lines` still hold their markup: taken out by take_markup, once the
    # size checks have passed.
    markup: str | None = None


def _field(loc: tuple) -> str:
    """pydantic's error location as a field name: ('texts', 3) → texts[3]."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_body(body: bytes) -> object:
    """Strict UTF-8, then strict JSON (no NaN or Infinity)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(
            400, "body", f"request body is not valid UTF-8 (byte {e.start})"
        ) from None
    if not text.strip():
        raise RequestError(400, "body", "request body is empty; send a JSON object")
    try:
        return json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise RequestError(
            400, "body", f"malformed JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except RecursionError:
        raise RequestError(
            400, "body", "malformed JSON: nested too deeply (arrays or objects within each other)"
        ) from None
    except ValueError as e:
        raise RequestError(400, "body", f"malformed JSON: {e}") from None


def parse_translate_request(
    body: bytes, limits: RequestLimits, defaults: DecodeConfig
) -> TranslateRequest:
    """Check a /translate body; raise RequestError naming the first field at fault."""
    if len(body) > limits.max_bytes:
        raise RequestError(413, "body", f"request body over {limits.max_bytes} bytes")
    data = parse_json_body(body)
    try:
        req = TranslateBody.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = _field(first["loc"])
        if first["type"] == "model_type" or not first["loc"]:
            raise RequestError(422, "body", "the body must be a JSON object") from None
        raise RequestError(422, field, f"{field}: {first['msg'].lower()}") from None

    if req.text is not None and req.texts is not None:
        raise RequestError(422, "texts", "give text or texts, not both")
    if req.text is None and req.texts is None:
        raise RequestError(422, "text", "text (a string) or texts (a list of strings) is required")
    if req.text is not None:
        if not req.text.strip():
            raise RequestError(422, "text", "text is empty")
        lines, single, name = [req.text], True, "text"
    else:
        lines, single, name = list(req.texts or []), False, "texts"
        if not lines:
            raise RequestError(422, "texts", "texts is an empty list")
        if len(lines) > limits.max_lines:
            raise RequestError(
                413, "texts", f"texts has {len(lines)} items; at most {limits.max_lines} a request"
            )
    _check_text(lines, name, single)
    # Each whitespace-separated word is at least one SentencePiece piece, so a word count over
    # the budget refuses a request before sentence splitting and encoding, which take seconds
    # of CPU (and the GIL) for a megabyte of text.
    words = sum(len(line.split()) for line in lines)
    if words > limits.max_tokens:
        raise RequestError(
            413,
            name,
            f"{name} has {words} words; at most {limits.max_tokens} source tokens a request",
        )
    pairs = _glossary(req.glossary, limits) if req.glossary is not None else None
    options = _options(req, limits, defaults)
    markup = req.format if req.format in ("html", "xml") else None
    if markup is not None and options.nbest > 1:
        raise RequestError(422, "format", "format html or xml needs nbest 1")
    return TranslateRequest(
        lines, single, options, pairs, req.source_lang, req.target_lang, None, req.model, markup
    )


def _check_text(lines: list[str], name: str, single: bool) -> None:
    """A lone surrogate (JSON allows "\\ud800") is not text: a 422 naming the line."""
    for i, line in enumerate(lines):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as e:
            where = name if single else f"{name}[{i}]"
            code = ord(line[e.start])
            raise RequestError(
                422, where, f"{where} holds a lone surrogate (\\u{code:04x}), which is not text"
            ) from None


def take_markup(req: TranslateRequest) -> TranslateRequest:
    """With format html or xml, the request with its lines' markup taken out into `marked`
    (run after check_characters: parsing is the costlier). Malformed markup (unclosed or
    crossing tags) is a 422 naming the text, where `translate --tags` would translate it as
    text with a warning: a client can fix its request, a batch job should go on."""
    if req.markup is None:
        return req
    name = "text" if req.single else "texts"
    marked = []
    for i, line in enumerate(req.lines):
        try:
            marked.append(parse(line, req.markup))
        except MalformedMarkup as e:
            where = name if req.single else f"{name}[{i}]"
            raise RequestError(422, where, f"{where}: malformed {req.markup} markup: {e}") from None
    return replace(req, lines=[m.text for m in marked], marked=marked, markup=None)


def _glossary(pairs: list[list[str]], limits: RequestLimits) -> list[tuple[str, str]]:
    if len(pairs) > limits.max_glossary_pairs:
        raise RequestError(
            413,
            "glossary",
            f"glossary has {len(pairs)} term pairs; at most {limits.max_glossary_pairs} a request",
        )
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise RequestError(
                422, f"glossary[{i}]", f"glossary[{i}] is a [source term, target term] pair"
            )
        _check_text(pair, f"glossary[{i}]", False)
    # Counted, not built: the glossary is built by request_glossary, once the request has
    # passed the checks that cost little, and kept for later requests.
    chars = sum(len(a) + len(b) for a, b in pairs)
    if chars > limits.max_glossary_chars:
        raise RequestError(
            413,
            "glossary",
            f"glossary has {chars} characters in its terms; "
            f"at most {limits.max_glossary_chars} a request",
        )
    return [(a, b) for a, b in pairs]


def request_glossary(req: TranslateRequest, default: Glossary | None) -> Glossary | None:
    """The glossary a request decodes with: the server's, with the request's pairs added (a
    bad term a 422 naming the glossary)."""
    if req.glossary is None:
        return default
    try:
        return with_pairs(default, req.glossary, origin="glossary")
    except UserError as e:
        raise RequestError(422, "glossary", str(e)) from None


def check_characters(req: TranslateRequest, limits: RequestLimits, piece_chars: int) -> None:
    """Refuse texts with more characters (spaces aside) than the token limit can hold, tokens
    being at most `piece_chars` characters long: a megabyte of punctuation is one "word" to the
    word count, and would otherwise reach the glossary, sentence splitting and encoding. Texts
    in html or xml are counted with their markup, before it is parsed (take_markup)."""
    # Twice: Unicode normalization may join two characters (a letter and its accent) into one.
    limit = limits.max_tokens * piece_chars * 2
    chars = sum(len("".join(line.split())) for line in req.lines)
    if chars > limit:
        name = "text" if req.single else "texts"
        raise RequestError(
            413,
            name,
            f"{name} has {chars} characters besides spaces; at most {limit} a request (as many "
            f"as {limits.max_tokens} source tokens can hold)",
        )


def escape_specials(req: TranslateRequest, specials: re.Pattern) -> TranslateRequest:
    """The request with every string its tokenizer would read as one special token (`specials`
    finds where one starts: `</s>`, a language tag `>>fr<<`) made plain text, in its texts and
    its target terms: a client may not end a sentence or pick a target language from inside
    its text. The string's first character takes its fullwidth form, which the tokenizer's
    NFKC normalization turns back, so the model reads the same pieces as before, as text."""

    def escape(text: str) -> str:
        starts = [m.start() for m in specials.finditer(text)]
        if not starts:
            return text
        chars = list(text)
        for at in starts:
            if "!" <= chars[at] <= "~":
                chars[at] = chr(ord(chars[at]) + 0xFEE0)
        return "".join(chars)

    glossary = req.glossary and [(source, escape(target)) for source, target in req.glossary]
    return replace(req, lines=[escape(line) for line in req.lines], glossary=glossary)


def check_source_tokens(
    req: TranslateRequest, tokens: int, limits: RequestLimits, terms: int = 0
) -> None:
    """Refuse a request whose texts, split into sentences and encoded, hold too many tokens, or
    too many for its beam size (with `terms`, the target-term tokens its sentences must hold,
    which constrained search decodes on top of the source)."""
    if tokens > limits.max_tokens:
        name = "text" if req.single else "texts"
        raise RequestError(
            413, name, f"{name} has {tokens} source tokens; at most {limits.max_tokens} a request"
        )
    beam = req.options.beam_size
    cost = (tokens + terms) * beam
    if cost > limits.max_beam_tokens:
        counted = f"({tokens} source + {terms} term tokens)" if terms else f"{tokens} source tokens"
        fewer = "fewer texts, fewer terms" if terms else "fewer texts"
        raise RequestError(
            413,
            "beam_size",
            f"{counted} × beam_size {beam} = {cost}; at most {limits.max_beam_tokens} a request "
            f"(send {fewer} or a smaller beam_size)",
        )


def check_sentence_tokens(req: TranslateRequest, lengths: list[list[int]], most: int) -> None:
    """Refuse a request holding a sentence of more source tokens than the model reads (`most`,
    EOS included; `lengths`: each line's sentences' tokens), counted before any cut."""
    for i, line in enumerate(lengths):
        longest = max(line, default=0)
        if longest > most:
            where = "text" if req.single else f"texts[{i}]"
            raise RequestError(
                413,
                where,
                f"{where} holds a sentence of {longest} source tokens; the model reads at most "
                f"{most} (split it into shorter sentences)",
            )


def _options(req: TranslateBody, limits: RequestLimits, defaults: DecodeConfig) -> DecodeConfig:
    beam = defaults.beam_size if req.beam_size is None else req.beam_size
    if not 1 <= beam <= limits.max_beam_size:
        raise RequestError(
            422, "beam_size", f"beam_size must be from 1 to {limits.max_beam_size}, not {beam}"
        )
    if req.nbest is None:
        nbest = min(defaults.nbest, beam)
    else:
        nbest = req.nbest
        if not 1 <= nbest <= beam:
            raise RequestError(
                422, "nbest", f"nbest must be from 1 to beam_size ({beam}), not {nbest}"
            )
    alpha = defaults.length_penalty if req.length_penalty is None else req.length_penalty
    if not (math.isfinite(alpha) and 0.0 <= alpha <= MAX_LENGTH_PENALTY):
        raise RequestError(
            422,
            "length_penalty",
            f"length_penalty must be from 0 to {MAX_LENGTH_PENALTY}, not {alpha}",
        )
    # Checked above as strictly as DecodeConfig's own validation, which model_copy skips.
    return defaults.model_copy(
        update={"beam_size": beam, "nbest": nbest, "length_penalty": float(alpha)}
    )


def _score(value: float) -> float | None:
    return value if math.isfinite(value) else None


def translate_answer(req: TranslateRequest, results: list[Hypotheses]) -> dict:
    """The JSON answer: translation and score of a text, or of each of texts (n-best too)."""
    # `{"translation", "score"}` for a text, `{"translations", "scores"}` for texts; with
    # nbest > 1 also every hypothesis. A score that is not finite is null: JSON has no NaN.

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
