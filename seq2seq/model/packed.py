"""float32 linear layers on oneDNN's pre-packed weights, for decoding on CPU.

torch's `F.linear` hands MKL the weight in its training layout at every call; oneDNN can lay a
weight out once, for the row count it will mostly see, and reuse that layout. Measured on the
2-core AMD EPYC (AVX-512) for enfr-small's shapes (benchmarks/RESULTS.md, ninth session): the
output projection (256 → 8,000) at 32 rows 1.7× faster, at 128 rows 1.3×; the attention and FFN
projections 1.1-1.5×, with 1 and 2 threads. The results are the same products summed in another
order: they differ from `F.linear`'s in the last bits (~1e-6 relative), so a near-tie between two
tokens can go the other way; the decoding benchmark reports how many outputs stay identical.

Only inference: a packed layer holds no float32 weight of its own (the layout is opaque to
autograd, checkpoints and exports), so a run is packed as it loads for decoding
(`decode.packed_weights`), never for training, export or int8. A tied output layer's packed copy
is the one extra: it sits beside the target embedding table (8 MB for an 8k × 256 table).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)


class PackedLinear(nn.Module):
    """y = x·Wᵀ + b on oneDNN's packed copy of W; `weight` kept only when shared (a tied output
    layer reads the target embedding table, which stays anyway), for a shortlist's row subset."""

    def __init__(self, linear: nn.Linear, rows_hint: int, keep_weight: bool):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        # Buffers (not in a state dict): counted where a model's tensors are, e.g. serve's /models.
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
        self.register_buffer("packed", packed, persistent=False)
        bias = None if linear.bias is None else linear.bias.detach()
        self.register_buffer("bias", bias, persistent=False)
        self.weight = linear.weight if keep_weight else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed"


def packing_unavailable(model: nn.Module) -> str | None:
    """Why `model` cannot decode on packed weights here, or None when it can."""
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.float32:
        return "packed weights are a float32 CPU path"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    return None


def pack_linears(model: nn.Module, rows_hint: int, skip: set[str] = frozenset()) -> list[str]:
    """Replace every float32 nn.Linear of `model` (names in `skip` aside) by a PackedLinear, in
    place, and return their names; on a model or machine oneDNN cannot serve, change nothing
    and warn once why (decoding then runs as before)."""
    why = packing_unavailable(model)
    names = [n for n, m in model.named_modules() if type(m) is nn.Linear and n not in skip]
    if why is None and names:
        why = _trial(model.get_submodule(names[0]), rows_hint)
    if why is not None:
        log.warning("decoding on torch's default GEMM, not oneDNN packed weights: %s", why)
        return []
    shared = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    for name in names:
        linear = model.get_submodule(name)
        packed = PackedLinear(linear, rows_hint, keep_weight=id(linear.weight) in shared)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, packed)
    return names


def _trial(linear: nn.Linear, rows_hint: int) -> str | None:
    """Pack one layer and compare one product with F.linear's: None when oneDNN serves."""
    # A fixed input: loading must not draw from torch's random generator (seeded sampling).
    x = torch.linspace(-1.0, 1.0, 2 * linear.in_features).view(2, -1)
    try:
        with torch.no_grad():
            got = PackedLinear(linear, rows_hint, keep_weight=False)(x)
            want = F.linear(x, linear.weight, linear.bias)
    except (RuntimeError, NotImplementedError, AttributeError) as e:  # op missing or refused
        return f"oneDNN refused the layout ({e.__class__.__name__}: {str(e)[:120]})"
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        return "oneDNN's product disagreed with torch's on a trial"
    return None
