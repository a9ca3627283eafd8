"""The decode options `evaluate`, `translate` and `serve` share, declared once.

`DecodeOptions` reads like a command's signature: each field is one option, with its type,
help and default. `@decode_options()` puts those options where a command's `DecodeOptions`
parameter stands (so `--help` lists them in that place) and hands the command one
`DecodeOptions` holding what was given. A decorator rather than shared `Annotated` types because
the types alone still left each command writing out the same 14 parameters and passing them on
one by one; this way a command reads as its own options plus one line for the shared ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer

from seq2seq.cli.base import (
    BatchSize,
    Checkpoint,
    Device,
    MaxTokens,
    Quantize,
    SrcLang,
    TgtLang,
    decode_settings,
)
from seq2seq.errors import UserError

if TYPE_CHECKING:  # the CLI imports the heavy modules inside each command, for a quick --help
    from seq2seq.config import DecodeConfig

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class DecodeOptions:
    """The shared decode options as given on the command line (None: the run's setting)."""

    checkpoint: Checkpoint = None
    beam_size: Annotated[
        int | None,
        typer.Option(help="Beam width; 1 is greedy (default: the run's decode.beam_size)."),
    ] = None
    length_penalty: Annotated[
        float | None, typer.Option(help="α of the GNMT length penalty ((5+len)/6)^α.")
    ] = None
    batch_size: BatchSize = None
    max_tokens: MaxTokens = None
    split_sentences: Annotated[
        bool | None,
        typer.Option(
            "--split-sentences/--no-split-sentences",
            help="Decode a line of several sentences sentence by sentence (default: the run's "
            "decode.split_sentences, on).",
        ),
    ] = None
    device: Device = "auto"
    quantize: Quantize = None
    use_shortlist: Annotated[
        bool,
        typer.Option(
            "--shortlist",
            help="Score only the run's lexical shortlist at each step (built by `seq2seq "
            "shortlist`): faster on CPU; scores renormalise over it.",
        ),
    ] = False
    # Terminology (issue 32): what the glossary and constraints files hold: decode/glossary.py.
    glossary: Annotated[
        Path | None,
        typer.Option(
            "--glossary",
            help="TSV of `source term<TAB>target term`: where a source term occurs (whole "
            "words, any case), its target term appears once in the translation (needs beam ≥ 2).",
        ),
    ] = None
    term_mode: Annotated[
        str | None,
        typer.Option(
            help="How --glossary terms reach the translation: place (the plain beam, each "
            "missing term put where its source term was translated and the grammar around it "
            "repaired; constrained where no place is found), constrain (constrained beam "
            "search), annotate (the source annotated inline with them, plain beam: a run trained "
            "with data.augment.terms) or both (default: the run's decode.term_mode, place).",
        ),
    ] = None
    constraints: Annotated[
        Path | None,
        typer.Option(
            "--constraints",
            help="JSON lines, one list of target terms per input line, each kept once in its "
            "translation (such lines are not split into sentences).",
        ),
    ] = None
    src_lang: SrcLang = None
    tgt_lang: TgtLang = None

    def settings(self, run: Path, **more: Any) -> DecodeConfig:
        """The run's decode settings with these options, and a command's own (`more`), over them."""
        given = {
            "beam_size": self.beam_size,
            "length_penalty": self.length_penalty,
            "batch_size": self.batch_size,
            "max_tokens": self.max_tokens,
            "split_sentences": self.split_sentences,
            "quantize": self.quantize,
            "term_mode": self.term_mode,
        }
        return decode_settings(run, **{**given, **more})

    def terms(self) -> tuple[Any, Any]:
        """The glossary and per-line constraints files read (or None), or one clear error."""
        from seq2seq.decode.glossary import read_constraints, read_glossary

        if self.glossary is not None and self.constraints is not None:
            raise UserError("give --glossary or --constraints, not both")
        return (
            read_glossary(self.glossary, self.src_lang, self.tgt_lang)
            if self.glossary is not None
            else None,
            read_constraints(self.constraints) if self.constraints is not None else None,
        )


# A command's DecodeOptions parameter defaults to this: what it receives when none is given.
DECODE_DEFAULTS = DecodeOptions()


def decode_options(*, omit: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Give a command the shared decode options (less `omit`) in place of its DecodeOptions."""
    hints = get_type_hints(DecodeOptions, include_extras=True)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    shared = [
        inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name])
        for f in fields(DecodeOptions)
        if f.name not in omit
    ]

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        [slot] = [i for i, p in enumerate(params) if p.annotation is DecodeOptions]
        name = params[slot].name

        @wraps(command)
        def wrapper(*args, **kwargs):
            given = {p.name: kwargs.pop(p.name) for p in shared}
            return command(*args, **{name: DecodeOptions(**given)}, **kwargs)

        # Typer builds a command's options from its signature: the shared ones take the slot's.
        params[slot : slot + 1] = shared
        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate
