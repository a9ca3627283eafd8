"""`seq2seq attention`: a sentence's cross-attention as a PNG (report/attention_plot.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import (
    Checkpoint,
    Device,
    Quantize,
    TrainedRun,
    decode_settings,
    log,
    user_errors,
)


@user_errors
def attention(
    ctx: typer.Context,
    sentence: Annotated[str, typer.Argument(help="Source sentence to translate.")],
    run: TrainedRun,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG to write (attention.png).")
    ] = None,
    checkpoint: Checkpoint = None,
    device: Device = "auto",
    quantize: Quantize = None,
) -> None:
    """Greedy-translate a sentence and draw each decoder layer's cross-attention as a PNG.

    Example:\n
      seq2seq attention --run runs/demo "I have three cats." --output cats.png
    """
    from seq2seq.report.attention_plot import attention_of_translation, load_for_attention
    from seq2seq.report.plot import _pyplot, plot_attention

    _pyplot()  # fail before loading a model when matplotlib is missing
    quantize = decode_settings(run, quantize=quantize).quantize  # checked as translate does
    model, tokenizer, decode, _ = load_for_attention(run, checkpoint, device, quantize=quantize)
    src, out, weights = attention_of_translation(model, tokenizer, decode, sentence)
    log.info("translation: %s", tokenizer.tgt.decode_pieces(out[:-1]))
    print(plot_attention(src, out, weights, output or Path("attention.png")))
