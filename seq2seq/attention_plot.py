"""Cross-attention weights of a trained model (§3.2.1), for looking at what it aligns.

SDPA never returns its weights, so this replays the decoder with the model's own modules and
an explicit softmax(QKᵀ/√d_k) in cross-attention; decoding and training keep the fused kernel.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from . import search
from .batching import no_peek_mask, pad, padding_mask
from .errors import UserError
from .model import MultiHeadAttention, Transformer


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


def attention_of_translation(
    model: Transformer, tokenizer, decode, sentence: str
) -> tuple[list[str], list[str], list[torch.Tensor]]:
    """Greedy-translate one sentence: source pieces, output pieces and per-layer weights."""
    # Output pieces end with EOS; each layer's weights are [H, output, source] for that output.
    if not sentence.strip():
        raise UserError("the sentence to translate is empty")
    ids = tokenizer.encode_src([sentence.strip()])[0]
    if len(ids) > model.cfg.max_positions:
        raise UserError(
            f"the sentence has {len(ids)} tokens; the model takes at most {model.cfg.max_positions}"
        )
    device = next(model.parameters()).device
    model.eval()
    special = tokenizer.ids
    src = pad([ids], pad_id=special.pad).to(device)
    greedy = decode.model_copy(update={"beam_size": 1, "nbest": 1})
    hyp = search.decode(model, src, greedy, special=special)[0][0]
    # Row t of the weights is the step that produced output t (start + the first t tokens in).
    tgt_in = torch.tensor([[special.start, *hyp.tokens]], device=device)
    _, weights = cross_attention_weights(model, src, tgt_in)
    src_pieces = tokenizer.src_pieces(ids)
    out_pieces = tokenizer.tgt_pieces([*hyp.tokens, special.eos])
    return src_pieces, out_pieces, [w[0].float().cpu() for w in weights]


def load_for_attention(run_dir: Path, checkpoint: Path | None, device: str):
    """The model, tokenizer and decode settings of a run, as `translate` would load them."""
    from .translator import load_translator

    translator, path = load_translator(run_dir, checkpoint, device)
    return translator.model, translator.tokenizer, translator.decode, path
