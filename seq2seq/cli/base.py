"""What every `seq2seq` command shares: the Typer app, global options, error handling and the
options several commands take. The commands live in one module each; cli/app.py registers them.

Each command imports its job inside its function. That is the one kind of function-local
import of seq2seq modules the house allows, and it dodges no loop (nothing imports the CLI):
the jobs pull in torch, datasets and transformers, which take seconds to import, so importing
them here would make `seq2seq --help` and every shell-completion keypress wait for them
(0.7 s → 12 s measured on a busy 2-core machine).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from seq2seq import __version__
from seq2seq.errors import UserError

if TYPE_CHECKING:  # the CLI imports the heavy modules inside each command, for a quick --help
    from seq2seq.config import DecodeConfig

app = typer.Typer(
    name="seq2seq",
    help="Train, evaluate and run encoder-decoder Transformer translation models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

log = logging.getLogger("seq2seq")

F = TypeVar("F", bound=Callable[..., Any])


class _TqdmHandler(logging.Handler):
    """Log lines through tqdm so they do not tear progress bars apart."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        tqdm.write(self.format(record), file=sys.stderr)


def setup_logging(quiet: bool) -> None:
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("seq2seq")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


def user_errors(fn: F) -> F:
    """Turn a UserError into one line on stderr and its exit code (a traceback with --debug)."""

    @wraps(fn)
    def wrapper(ctx: typer.Context, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except UserError as e:
            if global_options(ctx).get("debug"):
                traceback.print_exc()
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def global_options(ctx: typer.Context) -> dict[str, Any]:
    """Global options (--debug, --quiet) the callback stored on the root context."""
    return ctx.find_root().obj or {}


def _version(value: bool) -> None:
    if value:
        print(f"seq2seq {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option(help="Show tracebacks for errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = {"debug": debug, "quiet": quiet}
    setup_logging(quiet)
    if quiet or not sys.stderr.isatty():
        # datasets' per-stage bars turn into hundreds of lines in a log file; ours stays.
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


def decode_settings(run: Path, **options: Any) -> DecodeConfig:
    """The run's decode settings with the options given on the command line (None: unset)."""
    from seq2seq.config import run_decode

    return run_decode(run, **options)


TrainedRun = Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")]
BatchSize = Annotated[int | None, typer.Option(help="Sentences decoded together.")]
MaxTokens = Annotated[int | None, typer.Option(help="Also cap a batch at this many tokens.")]
Device = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")]
SrcLang = Annotated[
    str | None,
    typer.Option(help="Source language of a many-language model (M2M100 `en`, NLLB `eng_Latn`)."),
]
TgtLang = Annotated[
    str | None,
    typer.Option(help="Target language of a many-language model (M2M100 `fr`, NLLB `fra_Latn`)."),
]
Checkpoint = Annotated[
    Path | None, typer.Option(help="Weights to use (default: best, else latest).")
]
Quantize = Annotated[
    str | None,
    typer.Option(
        help="none or int8: int8 weights and dynamic int8 activations in every linear layer, "
        "on CPU (default: the run's decode.quantize, none).",
    ),
]
