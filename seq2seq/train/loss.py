"""Label-smoothed cross-entropy over target tokens, padding ignored (§5.4).

`label_smoothed_loss` takes logits (the reference, F.cross_entropy). Training uses
`linear_cross_entropy`, which fuses the output projection into the loss and never holds the
[tokens × vocabulary] logits: per chunk of rows it computes logits, loss and gradients while they
are in cache. Same numbers (a test holds it to the reference), a fraction of the time and memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.data.tokenizer import PAD_ID
from seq2seq.model.transformer import Transformer
from seq2seq.train import onednn


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int = PAD_ID
) -> torch.Tensor:
    """Sum over real target tokens of the label-smoothed cross-entropy (ε = `smoothing`)."""
    # Softmax in float32 whatever the autocast dtype: the log-sum-exp over the vocabulary is where
    # bf16/fp16 lose the most.
    return F.cross_entropy(
        logits.flatten(0, -2).float(),
        target.flatten(),
        ignore_index=pad_id,
        label_smoothing=smoothing,
        reduction="sum",
    )


def _chunk_rows(hidden: torch.Tensor, vocab: int) -> int:
    # ~4 MiB of float32 logits per chunk keeps a CPU core's working set in cache; a GPU wants
    # few, large chunks (kernel launches), while still never holding all logits at once.
    budget = (1 << 20) if hidden.device.type == "cpu" else (1 << 27)
    return max(16, budget // vocab)


class _LinearCrossEntropy(torch.autograd.Function):
    """Σ_rows CE_ε(softmax(hidden · weightᵀ + bias), target), gradients computed chunk by chunk
    (none for the bias, a constant).

    Every matmul runs in `compute` (the autocast dtype, else the inputs' own), with the logits,
    the softmax and the weight gradient's sum over chunks in float32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, smoothing, needs_grad, compute, bias=None):
        rows, vocab = hidden.size(0), weight.size(0)
        chunk = _chunk_rows(hidden, vocab)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if needs_grad else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_grad else None
        # Cast once, outside the chunk loop (the weight is the large one).
        h_all, w = hidden.to(compute), weight.to(compute)
        products = _Products(h_all, w, bias, chunk, needs_grad)
        accumulate_in_place = compute == torch.float32
        for start in range(0, rows, chunk):
            h, t = h_all[start : start + chunk], target[start : start + chunk, None]
            z_all = products.logits(h)
            z = z_all[: h.size(0)]  # the packed products' padding rows are dropped
            # CE_ε = lse − (1−ε)·z_y − ε·mean(z): −log p mixed with the uniform distribution,
            # lse = m + log Σ exp(z − m). One exp over the logits serves the loss and softmax.
            row_loss = -(1 - smoothing) * z.gather(1, t).squeeze(1) - smoothing * z.mean(1)
            top = z.amax(1, keepdim=True)
            torch.exp(torch.sub(z, top, out=z), out=z)
            total = z.sum(1, keepdim=True)
            loss += (row_loss + (top + total.log()).squeeze(1)).sum()
            if not needs_grad:
                continue
            # ∂CE_ε/∂z = softmax(z) − (1−ε)·onehot(y) − ε/V, built in place in the logits.
            z.mul_(total.reciprocal_()).sub_(smoothing / vocab)
            z.scatter_add_(1, t, z.new_full(t.shape, -(1 - smoothing)))
            if accumulate_in_place:  # no temporaries: write and add straight into the results
                products.input_grad(z_all, out=grad_hidden[start : start + chunk])
                grad_weight.addmm_(z.T, h)
            else:  # bf16/fp16 matmuls; the sum over chunks in float32
                g = z.to(compute)
                grad_hidden[start : start + chunk] = g @ w
                grad_weight += (g.T @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype),
            (grad_weight * grad_loss).to(ctx.weight_dtype),
            None,  # target
            None,  # smoothing
            None,  # needs_grad
            None,  # compute
            None,  # bias: a constant
        )


class _Products:
    """The chunks' two products with the output layer's weight: logits h·Wᵀ (+ bias) in float32
    and the input gradient g·W. On CPU in float32 both run on oneDNN's copies of W, packed once
    per loss, every product at `chunk` rows (onednn.py); elsewhere plain matmuls."""

    def __init__(self, h, w, bias, chunk: int, needs_grad: bool):
        self.w, self.bias, self.chunk = w, bias, chunk
        self.packed = self.packed_t = None
        if onednn.packs(h, w):
            self.packed = onednn.pack(w, chunk)
            self.packed_t = onednn.pack(w.t(), chunk) if needs_grad else None

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h·Wᵀ (+ bias), float32: h's rows first, then (packed) zero rows' up to `chunk`."""
        if self.packed is not None:
            return onednn.times(h, self.packed, self.chunk, self.bias)
        z = (h @ self.w.T).float()
        return z if self.bias is None else z.add_(self.bias)

    def input_grad(self, g: torch.Tensor, out: torch.Tensor) -> None:
        """out ← the first out.size(0) rows of g·W (float32)."""
        if self.packed_t is not None:
            out.copy_(onednn.times(g, self.packed_t, self.chunk)[: out.size(0)])
        else:
            torch.mm(g, self.w, out=out)


@torch.compiler.disable  # a Python loop over chunks: run it eagerly inside compiled graphs
def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    smoothing: float,
    *,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum of label-smoothed cross-entropy of `hidden @ weight.T (+ bias)` against `target` (no
    padding); the bias is a constant.

    Under autocast the matmuls run in the autocast dtype, as the rest of the model's do.
    """
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    device = hidden.device.type
    compute = hidden.dtype
    if torch.is_autocast_enabled(device):
        compute = torch.get_autocast_dtype(device)
    with torch.autocast(device, enabled=False):  # dtypes are chosen explicitly inside
        return _LinearCrossEntropy.apply(
            hidden, weight, target, smoothing, needs_grad, compute, bias
        )


class TranslationLoss(nn.Module):
    """The training objective of a Transformer: summed label-smoothed CE over real target tokens,
    plus, with guided alignment (`alignment`: a train.alignment config), its weighted loss.

    Wrapping the model in this module lets DDP and `torch.compile` see the whole computation,
    loss included, as one `forward`.
    """

    def __init__(self, model: Transformer, smoothing: float, alignment=None):
        super().__init__()
        self.model, self.smoothing = model, smoothing
        self.pad_id = model.pad_id
        self.alignment = alignment
        self._seen: list[tuple] = []
        self._recording = False
        if alignment is not None:
            block = model.decoder_layers[alignment.layer % len(model.decoder_layers)]
            # The head's queries are the cross-attention's own input (after the pre-norm).
            block.cross_attn.register_forward_hook(self._keep_inputs)

    def _keep_inputs(self, module, args, out) -> None:
        if self._recording:  # only inside this forward, never in validation or decoding
            self._seen.append(args)

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        src_mask: torch.Tensor,
        align: torch.Tensor | None = None,
    ) -> torch.Tensor:
        memory = self.model.encode(src, src_mask)
        self._recording = align is not None and self.alignment is not None
        try:
            # Causal-only self-attention: padded target positions may see padding, but they
            # are dropped below, and real positions never see a later (padded) key.
            states = self.model.decoder_states(tgt_in, memory, src_mask, None)
        finally:
            self._recording = False
        real = tgt_out != self.pad_id  # padded positions cost nothing in the output layer
        weight, bias = self.model.output_layer()
        loss = linear_cross_entropy(states[real], weight, tgt_out[real], self.smoothing, bias=bias)
        if self.alignment is None or align is None:
            return loss
        h, _, memory = self._seen.pop()[:3]
        self._seen.clear()
        attn = self.model.decoder_layers[self.alignment.layer].cross_attn
        probs = head_attention(attn, h, memory, src_mask, self.alignment.head)
        return loss + self.alignment.weight * alignment_loss(probs, align)


def head_attention(
    attn, h: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, head: int
) -> torch.Tensor:
    """One head's cross-attention weights [B, T, S] (§3.2.1), from its rows of the projections
    alone: the layer's own output is computed as always, by the fused kernel."""
    d = attn.d_model // attn.heads
    rows = slice(head * d, (head + 1) * d)  # keys are kv_proj's first d_model rows
    q = F.linear(h, attn.q_proj.weight[rows], attn.q_proj.bias[rows])
    k = F.linear(memory, attn.kv_proj.weight[rows], attn.kv_proj.bias[rows])
    scores = (q @ k.transpose(1, 2)).float() / d**0.5
    return scores.masked_fill(~src_mask[:, None, :], float("-inf")).softmax(dim=-1)


def alignment_loss(probs: torch.Tensor, align: torch.Tensor) -> torch.Tensor:
    """Garg et al. 2019 §3: summed cross-entropy between each aligned target piece's attention
    [B, T, S] and the uniform distribution over the source pieces it aligns to. `align` holds
    (row, target position, source position) links."""
    b, t, s = align.unbind(1)
    key = b * probs.size(1) + t
    links = torch.bincount(key, minlength=probs.size(0) * probs.size(1))[key]
    return -(probs[b, t, s].clamp_min(1e-9).log() / links).sum()
