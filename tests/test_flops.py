"""FLOP counting for MFU, and the GPU benchmark script's smoke run on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.config import ModelConfig
from seq2seq.model.flops import inference_flops, peak_flops, training_flops

REPO = Path(__file__).resolve().parents[1]


def test_training_flops_count_each_weight_against_the_tokens_it_sees():
    cfg = ModelConfig(d_model=2, heads=1, encoder_layers=1, decoder_layers=1, ffn_dim=4)
    # encoder 2 tokens × (4·d² + 2·d·f) = 64; decoder 3 × (6·d² + 2·d·f) = 120;
    # cross keys/values 2 × 2·d² = 16; output 3 × V·d = 18;
    # attention: encoder 2·2²·d = 16, decoder 2·3²·d + 2·3·2·d = 60 → 294 multiply-adds.
    assert training_flops(cfg, vocab=3, src_lens=[2], tgt_lens=[3]) == 6 * 294


def test_decoding_flops_are_one_forward_pass_over_the_emitted_tokens():
    cfg = ModelConfig(d_model=2, heads=1, encoder_layers=1, decoder_layers=1, ffn_dim=4)
    # The same 294 multiply-adds as above, at 2 FLOPs each and forward only: no backward.
    assert inference_flops(cfg, vocab=3, src_lens=[2], out_lens=[3]) == 2 * 294


def test_known_gpus_have_a_bf16_peak():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("Some Future Accelerator") is None


@pytest.mark.slow
def test_gpu_benchmark_runs_on_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench_gpu.py",
            "--device",
            "cpu",
            "--small",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["target_tokens_per_s"] > 0 and result["model_tflops_per_s"] >= 0
