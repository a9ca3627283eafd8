"""GPU training throughput and model FLOPs utilisation (MFU) for the base model shape.

    python scripts/bench_gpu.py                      # configs/en-fr.yaml dims, bf16, ~25k tokens
    python scripts/bench_gpu.py --compile            # with torch.compile
    python scripts/bench_gpu.py --device cpu --small --steps 3   # smoke test anywhere

Runs the trainer's own step (TranslationLoss with the fused output layer, accumulate_gradients,
fused Adam, autocast, gradient clipping) on synthetic batches: random ids with corpus-like
lengths, cut by the same token-budget batching, pinned and copied asynchronously as the loader
does. Prints tokens/s and MFU = model FLOPs (seq2seq/flops.py) / time / the GPU's bf16 peak.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import ModelConfig, load_config  # noqa: E402
from seq2seq.data.batching import collate, token_budget_batches  # noqa: E402
from seq2seq.data.tokenizer import EOS_ID  # noqa: E402
from seq2seq.model.flops import peak_flops, training_flops  # noqa: E402
from seq2seq.model.transformer import Transformer  # noqa: E402
from seq2seq.runtime import autocast_dtype, fast_math, resolve_device  # noqa: E402
from seq2seq.train.loss import TranslationLoss  # noqa: E402
from seq2seq.train.trainer import accumulate_gradients  # noqa: E402


def synthetic_batches(vocab: int, max_tokens: int, count: int, seed: int = 0):
    """`count` collated batches of random ids with log-normal lengths, length-bucketed."""
    rng = np.random.default_rng(seed)
    n = max(count * max_tokens // 20, 1000)
    src_len = np.clip(rng.lognormal(3.2, 0.45, n).astype(int), 3, 200)
    tgt_len = np.clip((src_len * rng.normal(1.1, 0.12, n)).astype(int), 3, 220)
    batches = token_budget_batches(src_len, tgt_len, max_tokens, rng)[:count]
    out = []
    for idx in batches:
        src = [rng.integers(4, vocab, s - 1).tolist() + [EOS_ID] for s in src_len[idx]]
        tgt = [rng.integers(4, vocab, t - 1).tolist() for t in tgt_len[idx]]
        out.append(collate(src, tgt))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=REPO / "configs" / "en-fr.yaml")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32", "tf32"])
    p.add_argument("--max-tokens", type=int, default=25000, help="padded tokens per batch")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first (and compiling)")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--small", action="store_true", help="tiny shape, for a smoke test")
    p.add_argument("--peak-tflops", type=float, help="override the device's bf16 peak")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()

    cfg = load_config(args.config)
    model_cfg, vocab = cfg.model, cfg.tokenizer.vocab_size
    if args.small:
        model_cfg = ModelConfig(
            d_model=64, heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=256, max_positions=256
        )
        vocab, args.max_tokens = 1000, min(args.max_tokens, 2000)
    device = resolve_device(args.device)
    amp = autocast_dtype(device, args.precision)
    fast_math(device, args.precision)
    torch.manual_seed(0)
    model = Transformer(model_cfg, vocab, vocab, joint_vocab=True).to(device)
    net: torch.nn.Module = TranslationLoss(model, smoothing=0.1)
    if args.compile:
        net = torch.compile(net)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1e-4,
        betas=(0.9, 0.98),
        eps=1e-9,
        fused=device.type == "cuda",
        foreach=device.type != "cuda",
    )
    scaler = torch.amp.GradScaler(device.type, enabled=amp == torch.float16)

    def autocast():
        return torch.autocast(device.type, dtype=amp, enabled=amp is not None)

    batches = synthetic_batches(vocab, args.max_tokens, count=16)
    if device.type == "cuda":
        batches = [b.pin_memory() for b in batches]

    def step(batch) -> None:
        accumulate_gradients(
            net, [batch], scale=1.0 / batch.ntokens, device=device, autocast=autocast, scaler=scaler
        )
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(batches[i % len(batches)])
    sync()
    warmup_s = time.perf_counter() - t0

    timed = [batches[i % len(batches)] for i in range(args.steps)]
    flops = tgt_tokens = all_tokens = 0
    for batch in timed:
        src_lens = batch.src_mask.sum(1).tolist()
        tgt_lens = (batch.tgt_out != 0).sum(1).tolist()
        flops += training_flops(model_cfg, vocab, src_lens, tgt_lens)
        tgt_tokens += sum(tgt_lens)
        all_tokens += sum(src_lens) + sum(tgt_lens)
    # One sync before and after: the CPU queues the next step while the GPU runs, as in training.
    sync()
    t = time.perf_counter()
    for batch in timed:
        step(batch)
    sync()
    total = time.perf_counter() - t
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_flops(name)
    result = {
        "device": name,
        "torch": torch.__version__,
        "precision": str(amp).replace("torch.", "") if amp else "fp32",
        "compile": args.compile,
        "d_model": model_cfg.d_model,
        "layers": f"{model_cfg.encoder_layers}+{model_cfg.decoder_layers}",
        "vocab": vocab,
        "params": sum(p.numel() for p in model.parameters()),
        "max_tokens": args.max_tokens,
        "steps": args.steps,
        "warmup_s": round(warmup_s, 1),
        "step_ms": round(1000 * total / args.steps, 1),
        "target_tokens_per_s": round(tgt_tokens / total),
        "tokens_per_s": round(all_tokens / total),
        "model_tflops_per_s": round(flops / total / 1e12, 2),
        "mfu": round(flops / total / peak, 4) if peak else None,
        "peak_tflops": peak / 1e12 if peak else None,
        "cuda_peak_mb": round(torch.cuda.max_memory_allocated(device) / 2**20)
        if device.type == "cuda"
        else None,
    }
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
