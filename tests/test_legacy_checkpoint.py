"""Runs written before special ids, activations and Marian layouts became settings still load
and decode exactly as they did (tests/data/legacy_run, made by tests/data/make_legacy_run.py
with the code of commit 47cebdc). Tokens, logits and greedy output are 47cebdc's; the beam
output is what the standard beam search of issue 12 finds with those same weights (47cebdc's
beam kept a greedy slot, so its beam output was meant to change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.decode.translator import load_translator

LEGACY = Path(__file__).parent / "data" / "legacy_run"


@pytest.mark.slow
def test_a_run_written_by_the_previous_code_decodes_identically():
    expected = json.loads((LEGACY / "expected.json").read_text(encoding="utf-8"))
    tensors = load_file(str(LEGACY / "expected.safetensors"))
    translator, _ = load_translator(LEGACY, device="cpu")
    assert translator.tokenizer.encode_src(expected["sentences"]) == expected["src_ids"]
    src, tgt_in = tensors["src"], tensors["tgt_in"]
    with torch.no_grad():
        logits = translator.model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))
    assert torch.allclose(logits, tensors["logits"], atol=1e-5, rtol=0)
    assert translator.translate(expected["sentences"]) == expected["beam"]
    greedy = translator.options.model_copy(update={"beam_size": 1})
    assert translator.translate(expected["sentences"], options=greedy) == expected["greedy"]
