"""`seq2seq import hf` and `export hf`: the importer or exporter a model's form calls for.

A saved Hugging Face folder says what it holds in config.json's model_type (MarianMTModel, or
M2M100ForConditionalGeneration for M2M100 and NLLB); a run says it by its tokenizer layout.
"""

from __future__ import annotations

from pathlib import Path

from seq2seq.config import Config, load_run_config
from seq2seq.interop.hf_m2m100 import (
    HUB_FILES,
    export_hf_m2m100,
    import_hf_m2m100,
    model_type,
)
from seq2seq.interop.hf_marian import export_hf_marian, import_hf_marian, resolve_source


def import_hf(source: str, run_dir: Path) -> Config:
    """Import a saved Hugging Face translation model (folder or hub name), recognised by
    config.json: MarianMTModel, or M2M100ForConditionalGeneration (M2M100, NLLB)."""
    folder = resolve_source(source, HUB_FILES)
    if model_type(folder) == "marian":
        return import_hf_marian(source, run_dir)
    return import_hf_m2m100(source, run_dir)


def export_hf(run_dir: Path, out: Path, checkpoint: Path | None = None) -> Path:
    """Write a run as the Hugging Face model it has the form of: M2M100 for an M2M100/NLLB
    run, MarianMTModel otherwise."""
    layout = load_run_config(run_dir).tokenizer.layout
    if layout in ("m2m100", "nllb"):
        return export_hf_m2m100(run_dir, out, checkpoint)
    return export_hf_marian(run_dir, out, checkpoint)
