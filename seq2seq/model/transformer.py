"""The encoder-decoder Transformer of Vaswani et al. (2017), "Attention Is All You Need".

Section numbers (§) refer to the paper. Masks are boolean, True where attention is allowed:
`src_mask` [B, S] marks real source tokens; `tgt_mask` [B, T, T] is the no-peek mask combined
with target padding (batching.no_peek_mask), or None for the causal mask alone, which is exact
for every real position. The decoder returns logits; softmax lives in the loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import PAD_ID, Tokenizer
from seq2seq.errors import ConfigError
from seq2seq.model import compiled_step

# Positions a decoder cache makes room for when its caller does not say (it doubles as needed).
INITIAL_CAPACITY = 16

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # the exact (erf) form, as transformers' "gelu"
    "swish": F.silu,
}


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same)."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # already 2i: do not double it
    angle = pos / torch.pow(10000.0, two_i / d_model)
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def fairseq_positions(length: int, d_model: int) -> torch.Tensor:
    """fairseq's table (transformers' M2M100SinusoidalPositionalEmbedding, float32 as there):
    sin(pos·ω_i) at i and cos(pos·ω_i) at d/2 + i, ω_i = 10000^(-i/(d/2 - 1))."""
    half = d_model // 2
    freq = torch.exp(
        torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1))
    )
    angle = torch.arange(length, dtype=torch.int64).float().unsqueeze(1) * freq.unsqueeze(0)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


def position_table(cfg: ModelConfig) -> torch.Tensor:
    """Row t is position t's vector: the configured table from `position_offset` on."""
    if cfg.positions == "fairseq":
        table = fairseq_positions(cfg.max_positions + cfg.position_offset, cfg.d_model)
    else:
        table = sinusoidal_positions(cfg.max_positions + cfg.position_offset, cfg.d_model)
    return table[cfg.position_offset :].contiguous()


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    dropout: float = 0.0,
    causal: bool = False,
) -> torch.Tensor:
    """§3.2.1 scaled dot-product attention; `mask` [B, 1, Tq|1, Tk] is True where allowed.

    A boolean mask makes SDPA add -inf to disallowed scores, so they get exactly zero weight.
    `causal` (without a mask) lets each query see itself and earlier keys only, which lets SDPA
    use its fastest (flash) kernels; no mask and not causal: every key is visible.
    """
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal
    )


class _MaskedScale(torch.autograd.Function):
    """y = x · keep · scale, saving only the boolean mask for the backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None, None


class Dropout(nn.Module):
    """Inverted dropout (§5.4), identical in law to `nn.Dropout`, cheaper on CPU.

    CPU random numbers are drawn one per element and dominate `nn.Dropout`'s cost there; this
    draws 64-bit words from the same generator and uses each as four 15-bit uniforms, so p is
    rounded to a multiple of 1/32768 (`p_used`), and kept values are scaled by 1/(1 − p_used),
    which keeps the expectation exact. Reproducible under `torch.manual_seed` like any op.
    """

    LEVELS = 1 << 15

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        # At least one level kept, so the scale stays finite for p just below 1.
        self._threshold = min(round(p * self.LEVELS), self.LEVELS - 1)

    @property
    def p_used(self) -> float:
        """The drop probability the CPU path really applies."""
        return self._threshold / self.LEVELS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_()
        lanes = words.view(torch.int16)[: x.numel()].view(x.shape)
        keep = (lanes & (self.LEVELS - 1)) >= self._threshold
        return _MaskedScale.apply(x, keep, 1.0 / (1.0 - self.p_used))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class MultiHeadAttention(nn.Module):
    """§3.2.2: h heads of attention over learned projections, concatenated and projected."""

    def __init__(self, d_model: int, heads: int, dropout: float, cross: bool = False):
        super().__init__()
        self.heads, self.d_model, self.dropout = heads, d_model, dropout
        if cross:  # queries from the decoder, keys/values from the encoder output
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:  # one matmul for q, k and v
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        if memory is None:
            q, k, v = self.qkv_proj(x).split(self.d_model, dim=-1)
            k, v = self._split_heads(k), self._split_heads(v)
        else:
            q = self.q_proj(x)
            k, v = self.memory_keys_values(memory)
        return self._attend(self._split_heads(q), k, v, mask, causal)

    def memory_keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of the encoder output, [B, H, S, d_head] each."""
        k, v = self.kv_proj(memory).split(self.d_model, dim=-1)
        return self._split_heads(k), self._split_heads(v)

    def step(self, x: torch.Tensor, kv: torch.Tensor, t: int) -> torch.Tensor:
        """Self-attention of one new position `t` over itself and the cached ones: its key and
        value are written in place into `kv` [N, 2, H, capacity, d_head] (keys 0, values 1)."""
        heads = self.qkv_proj(x).view(x.size(0), 3, self.heads, self.d_model // self.heads)
        kv[:, :, :, t].copy_(heads[:, 1:])
        # The newest position may see every cached one: no mask (and not SDPA's `is_causal`,
        # which would align a single query with the first key).
        return self._attend(
            heads[:, 0].unsqueeze(2), kv[:, 0, :, : t + 1], kv[:, 1, :, : t + 1], None
        )

    def step_cross(
        self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, src_mask: torch.Tensor
    ) -> torch.Tensor:
        """Cross-attention of one new position per hypothesis over cached encoder keys/values.

        `x` holds [sentences × beam] hypotheses, `k`/`v` one entry per sentence: a sentence's
        beams attend as `beam` queries over its keys, which are never copied per beam.
        `src_mask` [sentences, 1, S] is already shaped for the sentence's queries.
        """
        n = k.size(0)
        q = self.q_proj(x).view(n, -1, self.d_model)  # [sentences, beam, d]
        y = self._attend(self._split_heads(q), k, v, src_mask)
        return y.view(x.shape)

    def _attend(self, q, k, v, mask, causal: bool = False) -> torch.Tensor:
        y = attend(
            q,
            k,
            v,
            None if mask is None else mask.unsqueeze(1),  # broadcast over heads
            dropout=self.dropout if self.training else 0.0,
            causal=causal,
        )
        b, _, t, _ = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(b, t, self.d_model))

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d_model // self.heads).transpose(1, 2)


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2 (or another activation in place of max)."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str = "relu"):
        super().__init__()
        self.up = nn.Linear(d_model, ffn_dim)
        self.down = nn.Linear(ffn_dim, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.activation(self.up(x)))


class Residual(nn.Module):
    """§5.4: LayerNorm(x + Dropout(Sublayer(x))); pre-norm: x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """§3.1: self-attention then feed-forward, each in a residual block."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation)
        self.attn_block = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ffn_block = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        key_mask = src_mask.unsqueeze(1)  # [B, 1, S]: every query sees every real key
        x = self.attn_block(x, lambda h: self.self_attn(h, key_mask))
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(
            cfg.d_model, cfg.heads, cfg.attention_dropout, cross=True
        )
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation)
        self.self_block = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.cross_block = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ffn_block = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        causal = tgt_mask is None
        x = self.self_block(x, lambda h: self.self_attn(h, tgt_mask, causal=causal))
        # The queries are the self-attention block's output, not the layer's input.
        x = self.cross_block(x, lambda h: self.cross_attn(h, src_mask.unsqueeze(1), memory))
        return self.ffn_block(x, self.ffn)

    def step(self, x: torch.Tensor, cache: DecoderCache, layer: int) -> torch.Tensor:
        """One new position through the layer, reading and writing the layer's cache."""
        kv, t = cache.layer(layer), cache.length
        x = self.self_block(x, lambda h: self.self_attn.step(h, kv, t))
        x = self.cross_block(
            x,
            lambda h: self.cross_attn.step_cross(
                h, cache.cross_k[layer], cache.cross_v[layer], cache.query_mask
            ),
        )
        return self.ffn_block(x, self.ffn)


@dataclass
class DecoderCache:
    """What incremental decoding keeps between steps (fairseq's incremental state).

    Self-attention keys and values of each hypothesis's positions so far live in one buffer
    allocated once for the batch's longest output (rows are sentences × beam, a sentence's
    beams adjacent): a step writes its position in place instead of concatenating, and a beam
    reorder or a shrinking batch gathers the rows into a second buffer that then swaps in, just
    before the next step reads them, so a reorder and a shrink in the same step copy once.
    Cross-attention keys/values of the encoder output are computed once and kept once per
    sentence.

    With the compiled step (`compiled`), a reorder gathers no keys: `origin` [rows, capacity]
    says which row of the buffer holds each position of each hypothesis (a position is written
    once, into the row of the hypothesis that made it), a reorder gathers those indices, and
    the step's attention reads through them. Before a Python step, or to read `self_k`, the
    rows are gathered once and the cache goes on without `origin`.
    """

    kv: torch.Tensor  # [rows, layers, 2 (keys, values), H, capacity, d_head]; first `rows` used
    cross_k: list[torch.Tensor]  # [sentences, H, S, d_head] each
    cross_v: list[torch.Tensor]
    src_mask: torch.Tensor  # [sentences, S]
    beam: int = 1
    length: int = 0  # positions decoded so far
    rows: int = 0  # hypotheses decoding now
    spare: torch.Tensor | None = None  # where the next gather writes, then swapped with `kv`
    pending: torch.Tensor | None = None  # the rows the next step continues, not yet gathered
    limit: int | None = None  # the most positions the buffer may ever need (max_positions)
    compiled: compiled_step.StepPlan | None = None  # the compiled layer loop, when it serves
    origin: torch.Tensor | None = None  # [rows, capacity] int64: the row holding each position

    def __post_init__(self) -> None:
        self.rows = self.rows or self.kv.size(0)
        if self.compiled is not None and self.origin is None:
            self.origin = self.kv.new_empty(self.kv.size(0), self.kv.size(4), dtype=torch.long)
        self._views()

    @property
    def self_k(self) -> list[torch.Tensor]:
        """Each layer's cached keys [rows, H, length, d_head] (views of the buffer)."""
        self.settle()
        self.gather_rows()
        return [self.kv[: self.rows, i, 0, :, : self.length] for i in range(self.kv.size(1))]

    @property
    def self_v(self) -> list[torch.Tensor]:
        """Each layer's cached values [rows, H, length, d_head] (views of the buffer)."""
        self.settle()
        self.gather_rows()
        return [self.kv[: self.rows, i, 1, :, : self.length] for i in range(self.kv.size(1))]

    def layer(self, i: int) -> torch.Tensor:
        """Layer i's keys and values [rows, 2, H, capacity, d_head], for a step to use."""
        return self._layers[i]

    def reorder(self, rows: torch.Tensor) -> None:
        """Hypothesis i continues row `rows[i]` (beams moving within their sentence)."""
        self.pending = rows if self.pending is None else self.pending.index_select(0, rows)

    def keep(self, sentences: torch.Tensor) -> None:
        """Only these sentences (and all their beams) go on, in this order."""
        rows = (
            sentences.unsqueeze(1) * self.beam + torch.arange(self.beam, device=sentences.device)
        ).view(-1)
        self.reorder(rows)
        self.cross_k = [t.index_select(0, sentences) for t in self.cross_k]
        self.cross_v = [t.index_select(0, sentences) for t in self.cross_v]
        self.src_mask = self.src_mask.index_select(0, sentences)
        self.query_mask = self.src_mask.unsqueeze(1)

    def settle(self) -> None:
        """Gather the pending rows and make room for one more position: before a step."""
        if self.pending is not None:
            rows, self.pending = self.pending, None
            if self.origin is not None:  # the compiled step reads through `origin`: move that
                self.origin = self.origin[: self.rows].index_select(0, rows)
            else:
                self._gather(rows)
            self.rows = rows.numel()
            self._views()
        if self.length == self.kv.size(4):
            self._grow()

    def _gather(self, rows: torch.Tensor) -> None:
        """Row i of the buffer becomes row `rows[i]` (through the spare buffer)."""
        if self.spare is None:
            self.spare = torch.empty_like(self.kv)
        t, into = self.length, self.spare[: rows.numel(), ..., : self.length, :]
        if self.kv.requires_grad:  # outside inference mode (tests): `out=` cannot record it
            into.copy_(self.kv[: self.rows, ..., :t, :].index_select(0, rows))
        else:
            torch.index_select(self.kv[: self.rows, ..., :t, :], 0, rows, out=into)
        self.kv, self.spare = self.spare, self.kv

    def _grow(self) -> None:
        """Twice the room (a caller that did not say how long outputs may get)."""
        capacity = 2 * self.kv.size(4)
        if self.limit is not None:
            capacity = max(min(capacity, self.limit), self.length + 1)
        shape = (*self.kv.shape[:4], capacity, self.kv.size(5))
        kv = self.kv.new_empty(shape)
        # Through `origin` a hypothesis may read any row: all of them move.
        held = self.kv.size(0) if self.origin is not None else self.rows
        kv[:held, ..., : self.length, :] = self.kv[:held, ..., : self.length, :]
        self.kv, self.spare = kv, None
        if self.origin is not None:
            origin = self.origin.new_empty(self.origin.size(0), capacity)
            origin[:, : self.length] = self.origin[:, : self.length]
            self.origin = origin
        self._views()

    def gather_rows(self) -> None:
        """Each hypothesis's positions into its own row, and no `origin` from now on (for a
        Python step, which reads rows in place; call after `settle`)."""
        if self.origin is None:
            return
        t, origin, self.origin = self.length, self.origin[: self.rows, : self.length], None
        if t:
            positions = torch.arange(t, device=origin.device).expand_as(origin)
            held = self.kv[origin, :, :, :, positions]  # [rows, t, layers, 2, H, d_head]
            self.kv[: self.rows, ..., :t, :] = held.permute(0, 2, 3, 4, 1, 5)
        self._views()

    def _views(self) -> None:
        self._layers = [self.kv[: self.rows, i] for i in range(self.kv.size(1))]
        self.query_mask = self.src_mask.unsqueeze(1)  # [sentences, 1, S]: every beam's query


def _without_row(grad: torch.Tensor, row: int) -> torch.Tensor:
    """The gradient with one row zeroed (that row of the parameter does not train)."""
    grad = grad.clone()
    grad[row] = 0
    return grad


class Transformer(nn.Module):
    """Encoder-decoder Transformer; `forward` returns logits over the target vocabulary.

    `pad_id` is the padding row of the embeddings (zero at initialisation). When the decoder
    starts from that row (`start_id == pad_id`, as Marian), it is kept as loaded: Marian and
    CTranslate2's converter take the start as a fixed zero embedding, and a tied output layer
    would otherwise train the row.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        src_vocab: int,
        tgt_vocab: int,
        joint_vocab: bool,
        *,
        pad_id: int = PAD_ID,
        start_id: int | None = None,
    ):
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        d = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        # §3.4: one weight matrix for both embeddings and the pre-softmax projection.
        share = cfg.tie_embeddings if cfg.share_embeddings is None else cfg.share_embeddings
        share_src = share and joint_vocab and src_vocab == tgt_vocab
        self.tgt_embed = (
            self.src_embed if share_src else nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        )
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm stacks end without a norm; add one so outputs are normalised as in post-norm.
        self.encoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.output = nn.Linear(d, tgt_vocab, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embed.weight
        if cfg.final_logits_bias:  # a buffer, as in transformers: loaded, saved, never trained
            self.register_buffer("final_logits_bias", torch.zeros(tgt_vocab))
        else:
            self.final_logits_bias = None
        self.embed_scale = math.sqrt(d) if cfg.scale_embeddings else 1.0
        if start_id == pad_id:
            self.tgt_embed.weight.register_hook(partial(_without_row, row=pad_id))
        self.dropout = Dropout(cfg.dropout)
        self.register_buffer("positions", position_table(cfg), persistent=False)
        self._init_weights()

    def _init_weights(self) -> None:
        d = self.cfg.d_model
        fused = {
            id(proj)
            for m in self.modules()
            if isinstance(m, MultiHeadAttention)
            for proj in (getattr(m, "qkv_proj", None), getattr(m, "kv_proj", None))
            if proj is not None
        }
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.output:
                # Fused q/k/v projections start as their d_model-sized parts would alone.
                parts = module.weight.split(d, dim=0) if id(module) in fused else [module.weight]
                for part in parts:
                    nn.init.xavier_uniform_(part)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.output.weight, mean=0.0, std=d**-0.5)
        for emb in {self.src_embed, self.tgt_embed}:
            # Scaled by √d_model on the way in, so this keeps embeddings and positions comparable.
            nn.init.normal_(emb.weight, mean=0.0, std=d**-0.5)
            with torch.no_grad():
                emb.weight[self.pad_id].zero_()

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """§3.4 + §3.5: embeddings × √d_model plus sinusoidal positions, then dropout."""
        length = ids.size(1)
        if offset + length > self.cfg.max_positions:
            raise ValueError(
                f"sequence of {offset + length} tokens exceeds max_positions "
                f"({self.cfg.max_positions})"
            )
        x = embedding(ids) * self.embed_scale
        return self.dropout(x + self.positions[offset : offset + length])

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Encoder output ("memory") [B, S, d_model]."""
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x)

    def decoder_states(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Final decoder hidden states [B, T, d_model].

        `tgt_mask=None` is causal only: exact for every real position (keys after it are the
        only padding), so training, which ignores padded positions, may use the faster path.
        """
        x = self.embed(self.tgt_embed, tgt_in)
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.decoder_norm(x)

    def logits(self, states: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Pre-softmax scores over the target vocabulary, or over its `rows` only (sorted ids)."""
        if rows is not None:
            return self._row_logits(states, rows)
        out = self.output(states)
        return out if self.final_logits_bias is None else out + self.final_logits_bias

    def _row_logits(self, states: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        forward_rows = getattr(self.output, "forward_rows", None)
        if forward_rows is not None:  # an int8 output layer scores a subset itself
            out = forward_rows(states, rows)
        elif getattr(self.output, "weight", None) is not None:  # nn.Linear, or a packed one
            # A batch asks with one `rows` tensor every step: gather its weight rows once.
            cached = getattr(self, "_rows_weight", None)
            if cached is None or cached[0] is not rows:
                cached = self._rows_weight = (rows, self.output.weight[rows])
            out = F.linear(states, cached[1])
        else:  # an output layer that cannot score a subset: all of it, then the rows
            out = self.output(states).index_select(-1, rows)
        return out if self.final_logits_bias is None else out + self.final_logits_bias[rows]

    def start_decoding(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        beam: int = 1,
        capacity: int | None = None,
    ) -> DecoderCache:
        """An empty cache for `beam` hypotheses per sentence, with room for `capacity` positions
        (grown when exceeded); cross keys/values computed once."""
        cross = [layer.cross_attn.memory_keys_values(memory) for layer in self.decoder_layers]
        heads, limit = self.cfg.heads, self.cfg.max_positions
        room = min(capacity or INITIAL_CAPACITY, limit)
        # In the dtype the projections compute in (bf16 under autocast; `memory` leaves a
        # LayerNorm in float32), so the self-attention cache never holds or promotes to more.
        kv = cross[0][0].new_empty(
            memory.size(0) * beam,
            len(self.decoder_layers),
            2,
            heads,
            room,
            self.cfg.d_model // heads,
        )
        return DecoderCache(
            kv,
            [k for k, _ in cross],
            [v for _, v in cross],
            src_mask,
            beam,
            limit=limit,
            compiled=compiled_step.plan(self),
        )

    def decode_step(
        self, ids: torch.Tensor, cache: DecoderCache, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits [N, V] for the next position after feeding `ids` [N] (each hypothesis's latest
        token; N = sentences × beam), or [N, len(rows)] for a shortlist's sorted `rows`.

        Equal to the last position of the full decoder on the whole prefix, at O(t) per step
        instead of O(t²); `cache` grows by one position.
        """
        cache.settle()
        x = self.embed(self.tgt_embed, ids.unsqueeze(1), offset=cache.length)
        plan = None if torch.is_grad_enabled() else cache.compiled
        # Under autocast the Python step: the compiled one calls the operators as they are,
        # without autocast's casts (bf16 keys beside a float32 query).
        if plan is None or torch.is_autocast_enabled("cpu"):
            cache.gather_rows()
            for i, layer in enumerate(self.decoder_layers):
                x = layer.step(x, cache, i)
            out, ended = self.decoder_norm(x), False
        else:  # the same operators in C++, and the output layer where it can (no shortlist)
            ended = rows is None and plan.head is not None
            out = compiled_step.run(plan, x, cache, logits=ended)
        cache.length += 1
        return (out if ended else self.logits(out, rows)).squeeze(1)

    def output_layer(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The pre-softmax projection's weight [V, d_model] and fixed bias (or None), for a loss
        that fuses the projection with the softmax."""
        return self.output.weight, self.final_logits_bias

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        memory = self.encode(src, src_mask)
        return self.logits(self.decoder_states(tgt_in, memory, src_mask, tgt_mask))


@dataclass(frozen=True)
class Vocabulary:
    """What a model is sized to: its vocabularies and the special ids its embeddings know."""

    src_size: int
    tgt_size: int
    joint: bool
    pad_id: int = PAD_ID
    start_id: int | None = None  # the decoder's first input (None: BOS, a token of its own)

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> Vocabulary:
        """The vocabulary of a loaded tokenizer."""
        ids = tokenizer.ids
        return cls(
            tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint, ids.pad, ids.start
        )


def _transformer(cfg: ModelConfig, vocab: Vocabulary) -> Transformer:
    return Transformer(
        cfg,
        vocab.src_size,
        vocab.tgt_size,
        vocab.joint,
        pad_id=vocab.pad_id,
        start_id=vocab.start_id,
    )


# Architecture name (`model.arch`) → constructor. A new architecture (an importer's layout, a
# variant of the stack) is one entry here; everything that opens a run builds through it.
ARCHITECTURES: dict[str, Callable[[ModelConfig, Vocabulary], Transformer]] = {
    "transformer": _transformer,
}


def build_model(cfg: ModelConfig, vocab: Vocabulary | Tokenizer) -> Transformer:
    """The model a config describes, sized to a vocabulary (or a loaded tokenizer's)."""
    if not isinstance(vocab, Vocabulary):
        vocab = Vocabulary.of(vocab)
    make = ARCHITECTURES.get(cfg.arch)
    if make is None:
        raise ConfigError(
            f"model.arch {cfg.arch!r} is not an architecture seq2seq knows "
            f"({', '.join(sorted(ARCHITECTURES))})"
        )
    return make(cfg, vocab)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, tied weights counted once."""
    return sum(p.numel() for p in model.parameters())


def describe(model: nn.Module) -> list[str]:
    """One line per distinct parameter shape pattern, layers folded (`layers.*`)."""
    seen: dict[str, tuple[tuple[int, ...], int]] = {}
    for name, p in model.named_parameters():
        parts = ["*" if part.isdigit() else part for part in name.split(".")]
        key = ".".join(parts)
        shape, n = seen.get(key, (tuple(p.shape), 0))
        seen[key] = (shape, n + 1)
    return [
        f"{key:<48} {'×'.join(map(str, shape)):>14}" + (f"  (×{n})" if n > 1 else "")
        for key, (shape, n) in seen.items()
    ]
