"""float32 products on oneDNN's packed weights, for training on CPU.

torch's `F.linear` and `torch.mm` hand MKL the weight in its plain layout at every call, and on
the 2-core AMD EPYC (AVX-512) MKL's float32 kernels reach 83-88 GFLOP/s a core at the training
shapes, where oneDNN on a packed weight reaches 99-110 (benchmarks/RESULTS.md, twelfth session).
A weight changes every update, so it is packed at every call: 0.1-0.7 ms a weight against a GEMM
of 10-20 ms. Only the forward product x·Wᵀ and the input gradient g·W run on packed weights;
the weight gradient gᵀ·x has no fixed operand and stays with MKL, where it is as fast.

The results are the same products summed in another order (they differ from `F.linear`'s in the
last bits); the same inputs give the same bits, so a seed still fixes a run. Decoding never
comes here (a module in eval mode computes as before); nor does autocast, CUDA or a compiled
graph.
"""

from __future__ import annotations

import torch
from torch import nn


def packs(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x·Wᵀ runs on a packed W here: float32 on CPU, no autocast, not compiling."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """oneDNN's layout of `weight` [out, in] (any strides) for products with about `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def times(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [rows, in] · Wᵀ (+ bias) for a W laid out by `pack`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class _PackedLinear(torch.autograd.Function):
    """F.linear with its forward and input-gradient products on packed weights."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        rows = x.reshape(-1, x.size(-1))
        ctx.save_for_backward(rows, weight)
        ctx.has_bias = bias is not None
        y = times(rows, pack(weight, rows.size(0)), bias)
        return y.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad):
        rows, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:  # g·W = g·(Wᵀ)ᵀ: Wᵀ packed as a weight, no copy first
            grad_x = times(g, pack(weight.t(), g.size(0))).view(*grad.shape[:-1], -1)
        if ctx.needs_input_grad[1]:
            grad_w = g.t().mm(rows)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


def linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)`; a plain nn.Linear in training mode under autograd on packed weights."""
    if (
        not torch.compiler.is_compiling()  # first: a compiled graph never looks further
        and layer.training
        and type(layer) is nn.Linear  # a packed or int8 decoding layer computes as it does
        and torch.is_grad_enabled()
        and packs(x, layer.weight)
    ):
        return _PackedLinear.apply(x, layer.weight, layer.bias)
    return layer(x)
