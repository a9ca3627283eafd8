"""float32 decoding on CPU on oneDNN-packed weights: the same translations, less time per GEMM."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.config import run_decode
from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.decode.translator import load_translator
from seq2seq.model.packed import PackedLinear, pack_linears
from tests.factories import tiny_model

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)

LINES = ["the cat sat on the mat .", "a small house .", "the red car is fast ."]


def _linears(model: nn.Module, kind: type) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) is kind]


def test_a_packed_layer_computes_the_linear_map_of_its_weights():
    linear = nn.Linear(16, 24)
    packed = PackedLinear(linear, rows_hint=8, keep_weight=False)
    for shape in ((5, 16), (2, 3, 16), (0, 16)):
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(packed(x), F.linear(x, linear.weight, linear.bias))
    assert packed.weight is None and packed.out_features == 24


def test_every_linear_is_packed_and_the_tied_output_keeps_reading_the_embedding_rows():
    model = tiny_model().eval()
    before = _linears(model, nn.Linear)
    names = pack_linears(model, rows_hint=8)
    assert sorted(names) == sorted(before) and "output" in names
    assert _linears(model, nn.Linear) == []
    assert model.output.weight is model.tgt_embed.weight  # shared: no float32 copy added
    inner = model.get_submodule(next(n for n in names if n != "output"))
    assert inner.weight is None  # only the packed layout stays


def test_packed_decoder_gives_the_logits_of_the_plain_one():
    model = tiny_model().eval()
    src = torch.randint(4, 30, (3, 7))
    tgt = torch.randint(4, 30, (3, 5))
    src_mask, tgt_mask = padding_mask(src), no_peek_mask(tgt)
    with torch.no_grad():
        want = model(src, tgt, src_mask, tgt_mask)
        pack_linears(model, rows_hint=8)
        got = model(src, tgt, src_mask, tgt_mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_shortlisted_output_layer_stays_unpacked():
    model = tiny_model().eval()
    names = pack_linears(model, rows_hint=8, skip={"output"})
    assert "output" not in names and type(model.output) is nn.Linear


def test_without_onednn_decoding_stays_on_torch_gemm_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = tiny_model().eval()
    with caplog.at_level(logging.WARNING, logger="seq2seq.model.packed"):
        assert pack_linears(model, rows_hint=8) == []
    assert len(caplog.records) == 1 and "no oneDNN" in caplog.records[0].getMessage()
    assert "output" in _linears(model, nn.Linear)


def test_a_refused_layout_falls_back_to_torch_gemm_with_one_warning(monkeypatch, caplog):
    def refuse(*args):
        raise RuntimeError("could not create a primitive descriptor")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    model = tiny_model().eval()
    with caplog.at_level(logging.WARNING, logger="seq2seq.model.packed"):
        assert pack_linears(model, rows_hint=8) == []
    assert len(caplog.records) == 1 and "refused" in caplog.records[0].getMessage()
    assert len(_linears(model, nn.Linear)) > 0


@pytest.mark.slow
def test_packed_translations_equal_plain_float32_ones(trained_tiny_run):
    for beam in (1, 4):
        decode = run_decode(trained_tiny_run, beam_size=beam)
        plain, _ = load_translator(trained_tiny_run, device="cpu", decode=decode, packed=False)
        packed, _ = load_translator(trained_tiny_run, device="cpu", decode=decode)
        assert _linears(packed.model, PackedLinear) and not _linears(plain.model, PackedLinear)
        assert packed.translate(LINES) == plain.translate(LINES)


@pytest.mark.slow
def test_packed_weights_false_in_the_run_config_keeps_torch_gemm(trained_tiny_run):
    decode = run_decode(trained_tiny_run, packed_weights=False)
    translator, _ = load_translator(trained_tiny_run, device="cpu", decode=decode)
    assert not _linears(translator.model, PackedLinear)
