"""float32 products on oneDNN's packed weights, for the fused loss's output layer on CPU.

The loss multiplies chunks of ~100 rows by the [vocabulary × d_model] output weight, forward and
for the input gradient. `torch.mm` hands MKL the weight in its plain layout, and MKL lays the
8k-row weight out again for every chunk; here it is packed once per loss (0.1-0.3 ms) and every
chunk runs on the packed copy: +12% tokens/s for the whole training step on the 2-core EPYC.

oneDNN builds (and caches, with memory of its own) one kernel per input shape, so every product
here has exactly `rows` rows: a shorter last chunk is padded with zero rows and its extra
results dropped. Unpadded, the ragged last chunk (and, in an earlier try, the per-batch row counts
of every linear layer) made new kernels at nearly every step, and the process's RSS grew by
hundreds of MB over a run, mostly as freed memory the allocator could no longer give back.

The results are the same products summed in another order (they differ from `torch.mm`'s in the
last bits); the same inputs give the same bits, so a seed still fixes a run. Autocast and CUDA
never come here.
"""

from __future__ import annotations

import torch


def packs(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x·Wᵀ runs on a packed W here: float32 on CPU, no autocast."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and not torch.is_autocast_enabled("cpu")
    )


def pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """oneDNN's layout of `weight` [out, in] (any strides) for products with `rows` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def times(
    x: torch.Tensor, packed: torch.Tensor, rows: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x [≤ rows, in] · Wᵀ (+ bias) for a W laid out by `pack`: [rows, out], x's results first."""
    if x.size(0) < rows:  # one shape for every product: oneDNN's one kernel
        x = torch.cat([x, x.new_zeros(rows - x.size(0), x.size(1))])
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
