"""`seq2seq import`: a pretrained model turned into a run directory (interop/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import user_errors

import_app = typer.Typer(
    name="import",
    help="Turn a pretrained model into a run directory.\n\n"
    "Example:\n\n"
    "  seq2seq import hf-marian Helsinki-NLP/opus-mt-en-fr runs/opus-mt-en-fr\n\n"
    "  seq2seq import hf ~/models/nllb-200-distilled-600M runs/nllb",
    no_args_is_help=True,
)


@import_app.command("hf")
@user_errors
def import_hf(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(help="A saved Hugging Face model folder, or a hub name (offline: cache)."),
    ],
    run: Annotated[Path, typer.Argument(help="Run directory to create (new or empty).")],
) -> None:
    """Import a Hugging Face translation model, recognised from its config.json: MarianMTModel
    (OPUS-MT) or M2M100ForConditionalGeneration (M2M100, NLLB-200, with their languages).

    Examples:\n
      seq2seq import hf ~/models/m2m100_418M runs/m2m100\n
      seq2seq import hf ~/models/nllb-200-distilled-600M runs/nllb
    """
    from seq2seq.interop.hf import import_hf as run_import

    cfg = run_import(source, run)
    m, t = cfg.model, cfg.tokenizer
    langs = f", {len(t.languages)} languages" if t.languages else ""
    print(
        f"imported {source} into {run}: {m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.activation}, vocabulary {t.vocab_size}{langs}"
    )


@import_app.command("hf-marian")
@user_errors
def import_hf_marian(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="A saved MarianMTModel folder, or a hub name (offline: from the cache)."
        ),
    ],
    run: Annotated[Path, typer.Argument(help="Run directory to create (new or empty).")],
) -> None:
    """Import a Hugging Face MarianMTModel (OPUS-MT) as a run directory that translate,
    evaluate, info, attention, average and export use, and train --init-from fine-tunes.

    Examples:\n
      seq2seq import hf-marian Helsinki-NLP/opus-mt-en-fr runs/opus-mt-en-fr\n
      seq2seq import hf-marian ~/models/opus-mt-en-de runs/en-de
    """
    from seq2seq.interop.hf_marian import import_hf_marian as run_import

    cfg = run_import(source, run)
    m, t = cfg.model, cfg.tokenizer
    print(
        f"imported {source} into {run}: {m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.activation}, vocabulary {t.vocab_size}"
        f"{'' if t.joint else ' (separate target vocabulary)'}"
    )
