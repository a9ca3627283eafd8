"""`seq2seq demo-data`: the built-in demo corpus (data/demo_corpus.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import user_errors


@user_errors
def demo_data(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="Folder for the corpus files.")] = Path("data/demo"),
    train: Annotated[int, typer.Option(help="Training pairs.")] = 40000,
    valid: Annotated[int, typer.Option(help="Validation pairs.")] = 500,
    test: Annotated[int, typer.Option(help="Test pairs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 1234,
) -> None:
    """Write the built-in English→French demo corpus (numbers, dates, prices, counting).

    Example:\n
      seq2seq demo-data data/demo
    """
    from seq2seq.data.demo_corpus import write_demo_corpus

    counts = write_demo_corpus(out, n_train=train, n_valid=valid, n_test=test, seed=seed)
    print(f"wrote {', '.join(f'{n} {split}' for split, n in counts.items())} pairs to {out}")
