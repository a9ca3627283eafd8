"""`seq2seq score`: force-decode given (source, target) pairs with a run (decode/score.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import (
    BatchSize,
    Checkpoint,
    Device,
    MaxTokens,
    SrcLang,
    TgtLang,
    TrainedRun,
    decode_settings,
    user_errors,
)

ScoreSrc = Annotated[Path, typer.Option("--src", help="Source lines, one per pair.")]
ScoreTgt = Annotated[Path, typer.Option("--tgt", help="Target lines, line-aligned with --src.")]
ScoreOutput = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the scores here (replaced only on success)."),
]


@user_errors
def score(
    ctx: typer.Context,
    run: TrainedRun,
    src: ScoreSrc,
    tgt: ScoreTgt,
    output: ScoreOutput = None,
    src_lang: SrcLang = None,
    tgt_lang: TgtLang = None,
    batch_size: BatchSize = None,
    max_tokens: MaxTokens = None,
    checkpoint: Checkpoint = None,
    device: Device = "auto",
) -> None:
    """Score given translations: each target's log-probability given its source.

    One line per pair: `total<TAB>per token`, natural log, EOS counted (a forced language tag not).

    The building block of cross-entropy filtering, as fairseq-score and marian-scorer.

    Examples:\n
      seq2seq score --run runs/demo --src test.en --tgt test.fr\n
      seq2seq score --run runs/nllb --src a.en --tgt a.fr --src-lang eng_Latn --tgt-lang fra_Latn
    """
    from seq2seq.decode.score import score_files
    from seq2seq.decode.translator import load_translator

    # A closed pipe (`| head`) ends the process quietly, as it does any Unix filter.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    decode = decode_settings(run, batch_size=batch_size, max_tokens=max_tokens)
    translator, _ = load_translator(
        run, checkpoint, device, decode=decode, src_lang=src_lang, tgt_lang=tgt_lang
    )
    score_files(translator, src, tgt, output)
