"""`seq2seq average`: average the last checkpoints' weights (run/checkpoint.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import user_errors


@user_errors
def average(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory with checkpoints.")],
    last: Annotated[int, typer.Option(min=1, help="How many of the newest checkpoints.")] = 5,
    output: Annotated[
        Path | None,
        typer.Option(help="Where to write (default RUN/checkpoints/average_lastN.safetensors)."),
    ] = None,
) -> None:
    """Average the weights of the last N checkpoints into one (the paper averages the last 5).

    Examples:\n
      seq2seq average --run runs/en-fr-base --last 5\n
      seq2seq evaluate -r runs/demo --checkpoint runs/demo/checkpoints/average_last5.safetensors
    """
    from seq2seq.run.checkpoint import average_last

    out, steps = average_last(run, last, output)
    print(f"averaged steps {', '.join(map(str, steps))} into {out}")
