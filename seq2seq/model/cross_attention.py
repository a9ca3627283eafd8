"""Cross-attention weights (§3.2.1) made explicit, for alignments and pictures.

SDPA never returns its weights, so this replays the decoder with the model's own modules and
an explicit softmax(QKᵀ/√d_k) in cross-attention; decoding and training keep the fused kernel.
"""

from __future__ import annotations

import math

import torch

from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.model.transformer import MultiHeadAttention, Transformer


def explicit_cross_attention(
    attn: MultiHeadAttention, h: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """§3.2.1–3.2.2 cross-attention output and its weights [B, H, T, S], padding at weight 0."""
    q = attn._split_heads(attn.q_proj(h))
    k, v = attn.memory_keys_values(memory)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~src_mask[:, None, None, :], -math.inf)
    weights = scores.softmax(dim=-1)
    y = weights @ v
    b, _, t, _ = y.shape
    return attn.out_proj(y.transpose(1, 2).reshape(b, t, attn.d_model)), weights


@torch.no_grad()
def cross_attention_weights(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Teacher-forced logits and each decoder layer's cross-attention weights [B, H, T, S]."""
    # The same computation as `model.forward`, layer by layer, so the logits can be checked
    # against it.
    src_mask, tgt_mask = padding_mask(src, model.pad_id), no_peek_mask(tgt_in, model.pad_id)
    memory = model.encode(src, src_mask)
    x = model.embed(model.tgt_embed, tgt_in)
    captured: list[torch.Tensor] = []
    for layer in model.decoder_layers:
        x = layer.self_block(x, _self_attention(layer.self_attn, tgt_mask))
        x = layer.cross_block(x, _capturing(layer.cross_attn, memory, src_mask, captured))
        x = layer.ffn_block(x, layer.ffn)
    return model.logits(model.decoder_norm(x)), captured


def _self_attention(attn: MultiHeadAttention, tgt_mask: torch.Tensor):
    return lambda h: attn(h, tgt_mask)


def _capturing(attn, memory, src_mask, captured: list[torch.Tensor]):
    def run(h: torch.Tensor) -> torch.Tensor:
        y, weights = explicit_cross_attention(attn, h, memory, src_mask)
        captured.append(weights)
        return y

    return run
