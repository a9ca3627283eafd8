"""`seq2seq info`: a run's summary (report/info.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import user_errors


@user_errors
def info(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Summarise a run: model shape, parameters, tokenizer, steps trained, best BLEU.

    Examples:\n
      seq2seq info --run runs/demo\n
      seq2seq info --run runs/demo --json | jq .best_bleu
    """
    import json

    from seq2seq.report.info import format_summary, run_summary

    summary = run_summary(run)
    print(json.dumps(summary) if as_json else format_summary(summary))
