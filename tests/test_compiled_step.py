"""The compiled decoder step: the Python step's logits (to float32 rounding: its attention is its
own loop, not SDPA) and the same tokens when it is built; the Python step, after one warning,
when it is not."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import padding_mask
from seq2seq.decode.search import decode
from seq2seq.errors import UserError
from seq2seq.model import compiled_step
from seq2seq.model.int8 import (
    REDUCE_RANGE,
    ROW_QPARAMS,
    int8_linear,
    quantize_rows,
    use_activation_scales,
)
from seq2seq.model.packed import pack_linears
from seq2seq.model.quantize import quantize_int8
from tests.factories import tiny_model, tiny_shape

INT8_STEP = 2e-2
WHY_NOT = compiled_step.library(compiled_step.BUILD)
built = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled step here: {WHY_NOT}")


def _decode(model, src, beam: int, monkeypatch, compiled: bool):
    """Five steps' logits (row 0's best token fed to every row) and whether the cache used the
    compiled step."""
    monkeypatch.setenv(compiled_step.SWITCH, "1" if compiled else "0")
    src_mask = padding_mask(src)
    with torch.inference_mode():
        memory = model.encode(src, src_mask)
        cache = model.start_decoding(memory, src_mask, beam=beam, capacity=2)  # grows on the way
        ids = torch.full((src.size(0) * beam,), 1)
        out = []
        for _ in range(5):
            logits = model.decode_step(ids, cache)
            out.append(logits.clone())
            ids = logits.argmax(-1)
            if beam > 1:  # beams swap places, as a beam search reorders them
                cache.reorder(torch.arange(ids.numel()).view(-1, beam).flip(1).reshape(-1))
    return out, cache.compiled is not None


@built
@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"norm_first": False},
        {"norm_first": True, "activation": "gelu"},
        {"activation": "swish", "decoder_layers": 3},
    ],
)
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("packed", [False, True])
def test_the_compiled_step_gives_the_python_steps_logits_and_tokens(
    shape, beam, packed, monkeypatch
):
    model = tiny_model(tiny_shape(**shape), seed=3).eval()
    if packed:
        assert pack_linears(model, rows_hint=8)
    src = torch.randint(4, 40, (2, 6))
    src[1, 4:] = 0  # padding in the second sentence
    want, python_used_it = _decode(model, src, beam, monkeypatch, compiled=False)
    got, compiled_used_it = _decode(model, src, beam, monkeypatch, compiled=True)
    assert compiled_used_it and not python_used_it
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=2e-5)
        assert torch.equal(g.argmax(-1), w.argmax(-1))


def _with_biases(model):
    """`model` with random linear biases: initialised to zero, they would hide how a step adds
    them (a fused multiply-add rounds once, a multiply then an add twice)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.uniform_(-0.5, 0.5)
    return model


@built
@pytest.mark.parametrize(
    "shape",
    # widths not a multiple of 8: the fused int8 loops' scalar tails (csrc/int8_rows.h)
    [{}, {"norm_first": False, "activation": "gelu"}, {"d_model": 36, "ffn_dim": 44}],
)
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("per_row", [True, False])
def test_the_compiled_int8_step_gives_the_python_int8_steps_logits_and_tokens(
    shape, beam, per_row, monkeypatch
):
    model = quantize_int8(_with_biases(tiny_model(tiny_shape(**shape), seed=5).eval()))
    use_activation_scales(model, per_row=per_row)
    src = torch.randint(4, 40, (2, 6))
    src[0, 3:] = 0
    want, python_used_it = _decode(model, src, beam, monkeypatch, compiled=False)
    got, compiled_used_it = _decode(model, src, beam, monkeypatch, compiled=True)
    assert compiled_used_it and not python_used_it
    for g, w in zip(got, want):
        # An attention output a rounding away from an int8 step moves one quantized input.
        torch.testing.assert_close(g, w, rtol=0, atol=INT8_STEP)
        assert torch.equal(g.argmax(-1), w.argmax(-1))


@built
@pytest.mark.parametrize("per_row", [True, False])
def test_a_non_finite_input_to_a_compiled_int8_layer_is_the_python_steps_clear_error(
    per_row, monkeypatch
):
    model = quantize_int8(tiny_model(tiny_shape(norm_first=True), seed=5).eval())
    use_activation_scales(model, per_row=per_row)
    with torch.no_grad():  # the FFN's input in layer 1 is infinite
        model.decoder_layers[1].ffn_block.norm.bias.fill_(float("inf"))
    src = torch.randint(4, 40, (2, 6))
    message = "int8 layer decoder_layers.1.ffn.up: non-finite activation (inf/NaN) in its input"
    for compiled in (False, True):
        with pytest.raises(UserError, match=re.escape(message)):
            _decode(model, src, 1, monkeypatch, compiled=compiled)


@built
@pytest.mark.parametrize("per_row", [True, False])
def test_a_non_finite_input_to_the_compiled_int8_output_layer_names_it(per_row, monkeypatch):
    model = quantize_int8(tiny_model(tiny_shape(norm_first=True), seed=5).eval())
    use_activation_scales(model, per_row=per_row)
    with torch.no_grad():  # the final norm's output, the output layer's input, is infinite
        model.decoder_norm.bias.fill_(float("inf"))
    src = torch.randint(4, 40, (2, 6))
    message = "int8 layer output: non-finite activation (inf/NaN) in its input"
    for compiled in (False, True):
        with pytest.raises(UserError, match=re.escape(message)):
            _decode(model, src, 1, monkeypatch, compiled=compiled)


def _as(kind: str, model):
    """`model` decoding as `kind`: float32 on nn.Linear, oneDNN-packed, or int8."""
    if kind == "packed":
        assert pack_linears(model, rows_hint=8)
    return quantize_int8(model) if kind == "int8" else model


@built
@pytest.mark.parametrize("kind", ["plain", "packed", "int8"])
def test_the_compiled_step_ends_with_the_output_layer_and_its_final_bias(kind, monkeypatch):
    model = tiny_model(tiny_shape(final_logits_bias=True), seed=9).eval()
    with torch.no_grad():
        model.final_logits_bias.uniform_(-2.0, 2.0)
    model = _as(kind, model)
    src = torch.randint(4, 40, (2, 6))
    want, _ = _decode(model, src, 2, monkeypatch, compiled=False)
    got, _ = _decode(model, src, 2, monkeypatch, compiled=True)
    monkeypatch.setenv(compiled_step.SWITCH, "1")
    assert compiled_step.plan(model).head is not None  # the step ended with the output layer
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=INT8_STEP if kind == "int8" else 2e-5)
        assert torch.equal(g.argmax(-1), w.argmax(-1))


@built
@pytest.mark.parametrize("kind", ["plain", "packed", "int8"])
def test_a_shortlisted_compiled_step_scores_only_the_shortlists_rows(kind, monkeypatch):
    model = _as(kind, tiny_model(tiny_shape(final_logits_bias=True), seed=9).eval())
    src, rows = torch.randint(4, 40, (2, 6)), torch.tensor([2, 5, 11, 30, 39])
    found = {}
    for compiled in (False, True):
        monkeypatch.setenv(compiled_step.SWITCH, "1" if compiled else "0")
        with torch.inference_mode():
            cache = model.start_decoding(model.encode(src, padding_mask(src)), padding_mask(src))
            found[compiled] = model.decode_step(torch.full((2,), 1), cache, rows=rows)
    assert found[True].shape == (2, 5)
    torch.testing.assert_close(
        found[True], found[False], rtol=0, atol=INT8_STEP if kind == "int8" else 2e-5
    )


def test_without_a_build_the_python_step_decodes_after_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(compiled_step, "BUILD", tmp_path / "never-built")
    model = tiny_model(seed=3).eval()
    src = torch.randint(4, 40, (2, 6))
    with caplog.at_level(logging.WARNING, logger=compiled_step.__name__):
        first, used = _decode(model, src, 1, monkeypatch, compiled=True)
        again, used_again = _decode(model, src, 1, monkeypatch, compiled=True)
    warnings = [r.getMessage() for r in caplog.records if "Python decoder step" in r.getMessage()]
    assert len(warnings) == 1 and "not built" in warnings[0]
    assert not used and not used_again
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.isfinite(x).all() for x in first)


def test_installing_without_a_compiler_succeeds_with_one_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert compiled_step.main(tmp_path / "build") == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "no C++ compiler" in err and "Python step" in err
    assert not (tmp_path / "build" / f"{compiled_step.NAME}.so").exists()


def test_a_build_from_another_source_is_not_loaded(tmp_path):
    (tmp_path / f"{compiled_step.NAME}.so").write_bytes(b"not a library")
    (tmp_path / "stamp").write_text("torch 0.0 source 0123")
    why = compiled_step.library(tmp_path)
    assert why is not None and "another torch or source" in why


def _sdpa(q, k, v, mask, heads):
    """The Python step's attention on the compiled one's layout: [N, B, H·d] in and out."""
    n, b, _ = q.shape
    d = k.size(-1)
    allowed = None if mask.numel() == 0 else mask[:, None, None, :]
    y = torch.nn.functional.scaled_dot_product_attention(
        q.view(n, b, heads, d).transpose(1, 2), k, v, attn_mask=allowed
    )
    return y.transpose(1, 2).reshape(n, b, heads * d)


@built
@pytest.mark.parametrize("d_head", [64, 32, 128, 24])  # the unrolled widths, and any other
@pytest.mark.parametrize("keys", [1, 3, 4, 9, 37])  # four keys at a time, and what is left
def test_the_step_attention_is_sdpas_to_float32_rounding(d_head, keys):
    torch.manual_seed(keys)
    heads, n, b = 3, 2, 4
    q = torch.randn(n, b, heads * d_head) * 3
    kv = torch.randn(n, keys, 2, heads, d_head).permute(2, 0, 3, 1, 4)  # strided, as the cache
    mask = torch.rand(n, keys) > 0.4
    mask[:, 0] = True
    for m in (mask, torch.empty(0, dtype=torch.bool)):
        got = torch.ops.seq2seq_step.attention(q, kv[0], kv[1], m, heads)
        torch.testing.assert_close(got, _sdpa(q, kv[0], kv[1], m, heads), rtol=0, atol=3e-6)


@built
def test_a_masked_key_gets_zero_weight_in_the_step_attention():
    q, k, v = torch.randn(1, 1, 64), torch.randn(1, 1, 5, 64), torch.randn(1, 1, 5, 64)
    mask = torch.tensor([[True, True, False, True, False]])
    k[0, 0, 2], v[0, 0, 2] = 1e4 * q[0, 0], 1e4  # a masked key that would take every weight
    keep = mask[0].nonzero().squeeze(1)
    alone = torch.ops.seq2seq_step.attention(
        q, k[:, :, keep], v[:, :, keep], torch.empty(0, dtype=torch.bool), 1
    )
    torch.testing.assert_close(torch.ops.seq2seq_step.attention(q, k, v, mask, 1), alone)


@built
def test_a_query_with_no_allowed_key_gets_zeros_in_the_step_attention():
    q, k, v = torch.randn(1, 2, 64), torch.randn(1, 1, 3, 64), torch.randn(1, 1, 3, 64)
    mask = torch.zeros(1, 3, dtype=torch.bool)
    assert torch.equal(torch.ops.seq2seq_step.attention(q, k, v, mask, 1), torch.zeros(1, 2, 64))


def _decode_reordered(model, src, monkeypatch, compiled: bool):
    """Six steps of beam 3 where every beam continues beam 0 of its sentence, then beams 2, 0, 2,
    and the first sentence stops after step 3: logits and the cache's keys at the end."""
    monkeypatch.setenv(compiled_step.SWITCH, "1" if compiled else "0")
    src_mask = padding_mask(src)
    beam = 3
    with torch.inference_mode():
        cache = model.start_decoding(model.encode(src, src_mask), src_mask, beam=beam, capacity=2)
        ids = torch.full((src.size(0) * beam,), 1)
        out = []
        for t in range(6):
            logits = model.decode_step(ids, cache)
            out.append(logits.clone())
            ids = logits.argmax(-1)
            sentences = ids.numel() // beam
            pick = torch.tensor([0, 0, 0] if t % 2 else [2, 0, 2])
            cache.reorder((torch.arange(sentences).unsqueeze(1) * beam + pick).view(-1))
            if t == 3:
                cache.keep(torch.tensor([1]))
                ids = ids[beam:]
        keys = [k.clone() for k in cache.self_k]
    return out, keys, cache.origin is None


@built
@pytest.mark.parametrize("quantized", [False, True])
def test_beams_moved_by_index_read_the_history_a_gathered_cache_holds(quantized, monkeypatch):
    model = tiny_model(tiny_shape(decoder_layers=2), seed=7).eval()
    model = quantize_int8(model) if quantized else model
    src = torch.randint(4, 40, (2, 5))
    want, want_keys, _ = _decode_reordered(model, src, monkeypatch, compiled=False)
    got, got_keys, gathered = _decode_reordered(model, src, monkeypatch, compiled=True)
    assert gathered  # reading `self_k` gathered the rows the steps read through `origin`
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=INT8_STEP if quantized else 2e-5)
        assert torch.equal(g.argmax(-1), w.argmax(-1))
    for g, w in zip(got_keys, want_keys):
        torch.testing.assert_close(g, w, rtol=0, atol=INT8_STEP if quantized else 2e-5)


@built
def test_a_compiled_cache_moves_beam_indices_not_keys(monkeypatch):
    monkeypatch.setenv(compiled_step.SWITCH, "1")
    model = tiny_model(tiny_shape(), seed=7).eval()
    src = torch.randint(4, 40, (2, 5))
    with torch.inference_mode():
        cache = model.start_decoding(model.encode(src, padding_mask(src)), padding_mask(src), 2, 4)
        model.decode_step(torch.full((4,), 1), cache)
        buffer = cache.kv.clone()
        cache.reorder(torch.tensor([1, 1, 2, 3]))
        model.decode_step(torch.full((4,), 1), cache)
    assert torch.equal(cache.kv[:, ..., :1, :], buffer[:, ..., :1, :])  # position 0 stayed put
    assert cache.origin[:, :2].tolist() == [[1, 0], [1, 1], [2, 2], [3, 3]]


def _select_by_torch(logits: torch.Tensor, never: torch.Tensor, width: int):
    """decode/step.py's torch path: logsumexp over every column, never at -inf, then top-k."""
    norm = torch.logsumexp(logits, dim=-1)
    logits.index_fill_(1, never, -float("inf"))
    return (norm, *logits.topk(min(width, logits.size(1)), dim=-1))


@built
@pytest.mark.parametrize("vocab", [8000, 130, 9])  # blocks of 64 and 16, and what is left
@pytest.mark.parametrize("width", [1, 8])
def test_select_gives_the_normaliser_never_columns_and_best_columns_torch_does(vocab, width):
    torch.manual_seed(vocab + width)
    logits = torch.randn(5, vocab) * 6
    never = torch.tensor([0, 2])
    want, got = logits.clone(), logits.clone()
    norm, best, column = _select_by_torch(want, never, width)
    got_norm, got_best, got_column = compiled_step.select(got, never, width)
    torch.testing.assert_close(got_norm, norm, rtol=1e-6, atol=0)
    assert torch.equal(got, want)  # the never columns at -inf, nothing else written
    possible = best > -float("inf")  # of -inf ties (vocab 9, width 8: one), any column will do
    assert torch.equal(got_best, best) and torch.equal(got_column[possible], column[possible])


@built
def test_select_at_width_zero_gives_only_the_normaliser():
    logits = torch.randn(3, 100)
    norm, best, column = compiled_step.select(logits.clone(), torch.tensor([1]), 0)
    torch.testing.assert_close(norm, torch.logsumexp(logits, -1), rtol=1e-6, atol=0)
    assert best.shape == column.shape == (3, 0)


@built
def test_select_carries_nan_and_infinite_logits_as_logsumexp_does():
    inf = float("inf")
    logits = torch.tensor(
        [[0.0, 1.0, float("nan"), 2.0], [-inf, -inf, -inf, -inf], [0.0, inf, 1.0, 2.0]]
    )
    norm, _, _ = compiled_step.select(logits.clone(), torch.tensor([], dtype=torch.long), 1)
    want = torch.logsumexp(logits, -1)
    assert norm[0].isnan() and norm[1] == want[1] == -inf and norm[2] == want[2] == inf


@built
def test_select_gives_distinct_columns_when_fewer_than_width_are_possible():
    inf = float("inf")
    logits = torch.tensor([[-inf, 3.0, -inf, -inf, 1.0, -inf]])
    _, best, column = compiled_step.select(logits, torch.tensor([0]), 4)
    assert column[0, :2].tolist() == [1, 4] and best[0, :2].tolist() == [3.0, 1.0]
    assert best[0, 2:].tolist() == [-inf, -inf]
    assert sorted(column[0].tolist()) == sorted(set(column[0].tolist()))  # distinct, in range
    assert all(0 <= c < 6 for c in column[0].tolist())


@built
@pytest.mark.parametrize("beam", [1, 3])
def test_search_on_the_compiled_step_finds_the_python_steps_hypotheses(beam, monkeypatch):
    model = tiny_model(tiny_shape(decoder_layers=2), seed=11).eval()
    src = torch.randint(4, 40, (3, 6))
    src[2, 3:] = 0
    options = DecodeConfig(beam_size=beam, nbest=beam, max_len_b=8)
    found = {}
    for compiled in (False, True):
        monkeypatch.setenv(compiled_step.SWITCH, "1" if compiled else "0")
        found[compiled] = decode(model, src, options)
    for got, want in zip(found[True], found[False]):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        for g, w in zip(got, want):
            assert g.log_prob == pytest.approx(w.log_prob, abs=1e-4)


@built
@pytest.mark.parametrize("per_row", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [15, 4000])  # 4,000: the row passes split across threads
def test_an_int8_linear_outside_the_step_gives_the_aten_paths_product_bit_for_bit(
    per_row, bias, rows, monkeypatch
):
    linear = torch.nn.Linear(36, 20, bias=bias)  # 36: the fused loops' scalar tails too
    layer = int8_linear(quantize_rows(linear.weight), linear.bias)
    layer.per_row, layer.name = per_row, "encoder_layers.0.ffn.up"
    x = torch.randn(rows // 5, 5, 36) * 4
    found, threads = {}, torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for compiled in (False, True):
            monkeypatch.setenv(compiled_step.SWITCH, "1" if compiled else "0")
            with torch.inference_mode():
                found[compiled] = layer(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(found[True], found[False])
    args = (layer._packed, layer.bias, per_row, ROW_QPARAMS, REDUCE_RANGE)
    assert compiled_step.int8_product(x, *args) is not None  # the fused loops served
    x[1, 2, 3] = float("nan")
    message = "int8 layer encoder_layers.0.ffn.up: non-finite activation (inf/NaN) in its input"
    with pytest.raises(UserError, match=re.escape(message)), torch.inference_mode():
        layer(x)
