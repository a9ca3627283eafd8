"""Model FLOPs of a training step, for model FLOPs utilisation (MFU).

The usual 6·params·tokens, with each weight counted against the tokens it actually touches
(encoder weights see source tokens, decoder weights target tokens, cross-attention keys/values
source tokens once per decoder layer), plus the attention term 6·2·len_q·len_k·d_model per layer
and sequence. Multiplies by 6: 2 FLOPs a multiply-add, ×3 for forward and backward.
"""

from __future__ import annotations

from seq2seq.config import ModelConfig


def training_flops(cfg: ModelConfig, vocab: int, src_lens: list[int], tgt_lens: list[int]) -> float:
    """FLOPs of forward + backward over one batch with these (padded) sequence lengths."""
    d, f = cfg.d_model, cfg.ffn_dim
    src_tokens, tgt_tokens = sum(src_lens), sum(tgt_lens)
    macs = cfg.encoder_layers * (4 * d * d + 2 * d * f) * src_tokens  # self-attn proj + FFN
    macs += cfg.decoder_layers * (6 * d * d + 2 * d * f) * tgt_tokens  # self + cross q/out + FFN
    macs += cfg.decoder_layers * 2 * d * d * src_tokens  # cross-attention keys and values
    macs += vocab * d * tgt_tokens  # output projection
    for s, t in zip(src_lens, tgt_lens):  # QKᵀ and attention·V: 2·len_q·len_k·d each layer
        macs += cfg.encoder_layers * 2 * s * s * d
        macs += cfg.decoder_layers * (2 * t * t * d + 2 * t * s * d)
    return 6.0 * macs


def inference_flops(
    cfg: ModelConfig, vocab: int, src_lens: list[int], out_lens: list[int]
) -> float:
    """FLOPs of a forward pass that reads these sources and emits these output lengths: the
    forward third of `training_flops` (a KV-cached decoder step touches each weight once per
    output token, as teacher forcing does)."""
    return training_flops(cfg, vocab, src_lens, out_lens) / 3.0


# Dense bf16 tensor-core peaks (no sparsity), by device name fragment.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 80GB HBM3": 989e12,
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 70e12,
}


def peak_flops(device_name: str) -> float | None:
    """The bf16 peak of a GPU by its name, or None when unknown."""
    for fragment, peak in PEAK_BF16_FLOPS.items():
        if fragment in device_name:
            return peak
    return None
