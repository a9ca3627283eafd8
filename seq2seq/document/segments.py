"""A document as the texts to translate and the function that puts their translations back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Document:
    """A file read by a format module.

    `segments` are the texts to translate, one paragraph or string each, with their inline
    formatting written as XML-style tags that `seq2seq.decode.markup.parse(text, "xml")`
    accepts (`Press <r1>Save</r1> now<x2/>`: names of the format's choosing, placeholders as
    self-closing tags). `rebuild(translations)` takes one translation per segment, in order,
    carrying the same tags, and returns the whole file's bytes. Every format module exposes
    `read(data: bytes) -> Document` and raises `seq2seq.errors.UserError` for bad input.
    `target_lang`, set before `rebuild` when known, is written where the format names it
    (XLIFF: a file that holds targets must say their language).
    """

    segments: list[str]
    rebuild: Callable[[list[str]], bytes]
    target_lang: str = ""
