"""`seq2seq plot`: training curves or positional encodings as a PNG (report/plot.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import user_errors
from seq2seq.errors import UserError


@user_errors
def plot(
    ctx: typer.Context,
    what: Annotated[
        str, typer.Argument(help="`curves` (of a run) or `positional` (§3.5 encodings).")
    ] = "curves",
    run: Annotated[
        Path | None, typer.Option("--run", "-r", help="Run directory with a metrics log.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="PNG to write (RUN/curves.png, positional.png)."),
    ] = None,
    d_model: Annotated[int, typer.Option(help="positional: model width.")] = 64,
    length: Annotated[int, typer.Option(help="positional: number of positions.")] = 50,
) -> None:
    """Draw training and validation curves (loss, BLEU, learning rate), or the sinusoidal
    positional encodings, as a PNG.

    Examples:\n
      seq2seq plot --run runs/demo\n
      seq2seq plot positional --d-model 64 --length 50 --output pe.png
    """
    from seq2seq.report.plot import plot_curves, plot_positions

    if what == "positional":
        print(plot_positions(output or Path("positional.png"), d_model, length))
    elif what == "curves":
        if run is None:
            raise UserError("plot curves needs --run DIR")
        print(plot_curves(run, output))
    else:
        raise UserError(f"plot draws `curves` or `positional`, not {what!r}")
