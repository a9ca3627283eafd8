"""Pictures of the model itself: §3.5 positional encodings and cross-attention heatmaps."""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.data.tokenizer import load_tokenizer
from seq2seq.errors import UserError
from seq2seq.model.cross_attention import cross_attention_weights
from seq2seq.model.quantize import quantized_linears
from seq2seq.report import attention_plot
from seq2seq.report.plot import attention_cell_inches, plot_attention, plot_positions
from tests.factories import tiny_model, untrained_run
from tests.runs import copy_run


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return width, height


def test_plot_positional_writes_an_800x500_png(tmp_path):
    out = tmp_path / "pe.png"
    result = CliRunner().invoke(
        app, ["plot", "positional", "--d-model", "64", "--length", "50", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert _png_size(out) == (800, 500)


def test_plot_positional_rejects_an_odd_width(tmp_path):
    result = CliRunner().invoke(
        app, ["plot", "positional", "--d-model", "7", "--output", str(tmp_path / "x.png")]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: --d-model must be an even number")


def test_plot_of_an_unknown_picture_is_one_error_line():
    result = CliRunner().invoke(app, ["plot", "weights"])
    assert result.exit_code == 1
    assert "not 'weights'" in result.stderr


def test_plot_curves_still_needs_a_run():
    result = CliRunner().invoke(app, ["plot"])
    assert result.exit_code == 1
    assert "needs --run" in result.stderr


def test_plot_with_run_still_draws_curves(tmp_path):
    import json

    lines = [{"step": s, "split": "train", "loss": 1.0 / s, "lr": 1e-3} for s in range(1, 5)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = CliRunner().invoke(app, ["plot", "--run", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert _png_size(tmp_path / "curves.png") == (1500, 420)


# --- cross-attention ---------------------------------------------------------------------------


@pytest.fixture
def tiny(tiny_model_config):
    model = tiny_model(tiny_model_config, 40).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])  # the second is padded
    tgt_in = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 16]])
    return model, src, tgt_in


def test_capture_path_computes_exactly_what_the_model_computes(tiny):
    model, src, tgt_in = tiny
    logits, weights = cross_attention_weights(model, src, tgt_in)
    with torch.no_grad():
        expected = model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert [w.shape for w in weights] == [torch.Size([2, 4, 4, 5])] * 2  # layers × [B,H,T,S]


def test_weights_are_distributions_over_real_source_tokens(tiny):
    model, src, tgt_in = tiny
    _, weights = cross_attention_weights(model, src, tgt_in)
    for w in weights:
        torch.testing.assert_close(w.sum(dim=-1), torch.ones(2, 4, 4))
        assert (w >= 0).all()
        assert (w[1, :, :, 3:] == 0).all()  # padding gets no weight


def test_weights_equal_a_hand_computed_softmax_of_scaled_dot_products(tiny):
    model, src, tgt_in = tiny
    attn = model.decoder_layers[0].cross_attn
    seen = {}
    # What the unmodified model feeds its first cross-attention: queries h and memory.
    hook = attn.register_forward_pre_hook(lambda _m, args: seen.update(h=args[0], mem=args[2]))
    with torch.no_grad():
        model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))
    hook.remove()
    _, weights = cross_attention_weights(model, src, tgt_in)
    d, heads = 32, 4
    d_k = d // heads
    wq, bq = attn.q_proj.weight.detach(), attn.q_proj.bias.detach()
    wk, bk = attn.kv_proj.weight[:d].detach(), attn.kv_proj.bias[:d].detach()
    for b in range(2):
        real = int((src[b] != 0).sum())
        for head in range(heads):
            cols = slice(head * d_k, (head + 1) * d_k)
            for t in range(tgt_in.size(1)):
                q = (seen["h"][b, t] @ wq.T + bq)[cols]
                scores = [
                    float(q @ (seen["mem"][b, s] @ wk.T + bk)[cols]) / math.sqrt(d_k)
                    for s in range(real)
                ]
                top = max(scores)
                exp = [math.exp(x - top) for x in scores]
                hand = [e / sum(exp) for e in exp] + [0.0] * (src.size(1) - real)
                got = weights[0][b, head, t].tolist()
                assert got == pytest.approx(hand, abs=1e-5)


def test_attention_figure_has_a_cell_per_head_plus_the_mean_per_layer(tmp_path):
    weights = [torch.softmax(torch.randn(4, 6, 5), dim=-1) for _ in range(2)]
    out = plot_attention(list("abcde"), list("uvwxyz"), weights, tmp_path / "a.png")
    assert _png_size(out) == (5 * 300, 2 * 300)  # 3-inch cells at 100 dpi


def test_pictures_without_matplotlib_say_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(UserError, match=r"needs matplotlib: pip install 'seq2seq\[plot\]'"):
        plot_positions(tmp_path / "pe.png")
    with pytest.raises(UserError, match=r"needs matplotlib"):
        plot_attention(["a"], ["b"], [torch.ones(1, 1, 1)], tmp_path / "a.png")


@pytest.fixture
def run_dir(tmp_path_factory, demo_pairs) -> Path:
    """An untrained run of the tiny config: two decoder layers of four heads, outputs capped at
    8 tokens."""
    return untrained_run(tmp_path_factory.mktemp("untrained"), demo_pairs[:300])


def test_attention_command_writes_a_layers_by_heads_png(run_dir, tmp_path):
    out = tmp_path / "cats.png"
    result = CliRunner().invoke(
        app,
        ["attention", "--run", str(run_dir), "I have three cats.", "--output", str(out)]
        + ["--device", "cpu"],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    tokenizer = load_tokenizer(run_dir, joint=True)
    n_src = len(tokenizer.encode_src(["I have three cats."])[0])
    assert n_src >= 8  # longer than any output (max_len_b: 8), so it sizes the cells
    side = round(100 * attention_cell_inches(n_src, 8))
    # Two decoder layers down; the head mean and four heads across.
    assert _png_size(out) == (5 * side, 2 * side)


@pytest.mark.slow
def test_attention_quantize_overrides_the_runs_decode_quantize(run_dir, tmp_path, monkeypatch):
    run = copy_run(run_dir, tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("quantize: none", "quantize: int8"))
    int8 = []
    real = attention_plot.load_for_decoding

    def load_for_decoding(*args, **kwargs):
        run, device = real(*args, **kwargs)
        int8.append(bool(quantized_linears(run.model)))
        return run, device

    monkeypatch.setattr(attention_plot, "load_for_decoding", load_for_decoding)
    base = ["attention", "--run", str(run), "I have three cats.", "--device", "cpu"]
    for flags in ([], ["--quantize", "none"], ["--quantize", "int8"]):
        out = ["--output", str(tmp_path / f"{len(int8)}.png")]
        result = CliRunner().invoke(app, base + out + flags)
        assert result.exit_code == 0, result.output
    assert int8 == [True, False, True]  # the run's int8, then as the flag says
    result = CliRunner().invoke(app, base + ["--quantize", "int4"])
    assert result.exit_code == 2 and "quantize" in result.stderr and "'int8'" in result.stderr
    assert len(int8) == 3  # refused before any model is loaded


def test_attention_on_a_folder_that_is_not_a_run_is_one_error_line(tmp_path):
    result = CliRunner().invoke(app, ["attention", "--run", str(tmp_path), "Hello."])
    assert result.exit_code != 0
    assert result.stderr.startswith("error: ") and "not a run directory" in result.stderr
