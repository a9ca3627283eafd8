"""`seq2seq shortlist`: build a run's lexical shortlist (decode/shortlist.py) for `--shortlist`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import TrainedRun, user_errors

ShortlistSrc = Annotated[Path, typer.Option("--src", help="Source lines of a parallel corpus.")]
ShortlistTgt = Annotated[Path, typer.Option("--tgt", help="Target lines, line-aligned with --src.")]
ShortlistK = Annotated[
    int, typer.Option("--k", min=1, help="Target tokens kept per source token (by Dice score).")
]
Frequent = Annotated[
    int, typer.Option(min=0, help="Most frequent target tokens every batch keeps.")
]


@user_errors
def shortlist(
    ctx: typer.Context,
    run: TrainedRun,
    src: ShortlistSrc,
    tgt: ShortlistTgt,
    k: ShortlistK = 50,
    frequent: Frequent = 50,
) -> None:
    """Build a lexical shortlist into the run (RUN/shortlist.safetensors) for faster CPU decoding.

    Per source token, the k target tokens most often seen with it in the corpus's sentence
    pairs (Dice score), plus the most frequent target tokens; `translate`, `evaluate` and
    `serve` with --shortlist then score only those a batch's source words call for.

    Examples:\n
      seq2seq shortlist --run runs/demo --src data/train.en --tgt data/train.fr\n
      seq2seq translate --run runs/demo --shortlist --beam-size 1 < in.en
    """
    from seq2seq.decode.shortlist import build_run_shortlist

    path, built = build_run_shortlist(run, src, tgt, k=k, frequent=frequent)
    print(
        f"shortlist of {built.table.size(0)} source tokens × {built.k} target tokens "
        f"(+ {built.always.numel()} always kept) written to {path}"
    )
