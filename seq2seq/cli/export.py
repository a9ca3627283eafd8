"""`seq2seq export`: a run for another runtime or as int8 weights (interop/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import Checkpoint, TrainedRun, user_errors
from seq2seq.errors import UserError


@user_errors
def export(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="Folder to write (must not exist or be empty).")],
    run: TrainedRun,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="ctranslate2, hf-marian, hf (M2M100/NLLB runs as such), or int8 (a run "
            "directory of int8 weights for CPU decoding).",
        ),
    ] = "ctranslate2",
    checkpoint: Checkpoint = None,
    quantization: Annotated[
        str | None,
        typer.Option(help="ctranslate2: store the weights as int8 (or int16, float16, …)."),
    ] = None,
) -> None:
    """Write a trained model for a fast inference runtime (CTranslate2), as a Hugging Face
    MarianMTModel folder with its tokenizer (hf-marian), or as a run directory of int8 weights
    that translate, evaluate and serve --run decode on CPU (int8).

    Examples:\n
      seq2seq export --run runs/demo --format ctranslate2 runs/demo-ct2\n
      seq2seq export --run runs/demo --quantization int8 runs/demo-ct2-int8\n
      seq2seq export --run runs/demo --format hf-marian runs/demo-hf\n
      seq2seq export --run runs/demo --format int8 runs/demo-int8\n
      python -c "import ctranslate2; t = ctranslate2.Translator('runs/demo-ct2'); ..."
    """
    if quantization is not None and format != "ctranslate2":
        raise UserError("--quantization applies to --format ctranslate2 only")
    if format == "ctranslate2":
        from seq2seq.interop.ctranslate2 import export_ctranslate2

        written = export_ctranslate2(run, out, checkpoint, quantization=quantization)
        weights = f"{quantization} weights; " if quantization else ""
        print(f"wrote {written} (CTranslate2; {weights}source pieces only: it adds </s> itself)")
    elif format == "hf-marian":
        from seq2seq.interop.hf_marian import export_hf_marian

        written = export_hf_marian(run, out, checkpoint)
        print(f"wrote {written} (MarianMTModel and MarianTokenizer files)")
    elif format == "hf":
        from seq2seq.interop.hf import export_hf

        written = export_hf(run, out, checkpoint)
        print(f"wrote {written} (a Hugging Face model folder with its tokenizer files)")
    elif format == "int8":
        from seq2seq.interop.int8_run import export_int8

        written = export_int8(run, out, checkpoint)
        print(f"wrote {written} (a run directory of int8 weights: --run it to decode on CPU)")
    else:
        raise UserError(
            f"unknown export format {format!r}; available: ctranslate2, hf-marian, hf, int8"
        )
