"""int8 decoding on CPU: a loaded model's linear layers with int8 weights, activations quantized
to int8 on the fly (torch dynamic quantization, x86/fbgemm kernels).

Every `nn.Linear` is replaced (attention projections, FFN, the output projection, tied or not);
embeddings, layer norms, the positional table and `final_logits_bias` stay float32, and so do
the activations between layers, so the KV cache and the search are unchanged. The model is
quantized once, in memory, after its float32 weights are loaded: no quantized weights are ever
written to a run directory (checkpoints stay float32, `train --init-from` reads them as ever).
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from seq2seq.errors import UserError

log = logging.getLogger(__name__)

QUANTIZE_CHOICES = ("none", "int8")
# x86 is torch's default CPU engine (fbgemm's AVX2/AVX-512/VNNI kernels for dynamic linears);
# onednn is the alternative on the same CPUs. One scale per output row (per channel), as
# CTranslate2 does: on a half-trained demo model, beam 4 on 200 lines, 92% of the outputs equal
# float32's, against 88.5% with one scale per matrix; the GEMM is the same either way.
ENGINE = "x86"


def int8_device(device: str) -> str:
    """The device an int8 model loads on: CPU (`auto` means CPU for it); CUDA is refused."""
    if device in ("auto", "cpu"):
        return "cpu"
    raise UserError(
        f"--quantize int8 is a CPU path (torch dynamic int8 quantization); it cannot run on "
        f"{device!r}: use --device cpu, or --quantize none on the GPU"
    )


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear of `model` (on CPU) by an int8 dynamic one, in place."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("int8 quantization is a CPU path; load the model on CPU")
    if ENGINE not in torch.backends.quantized.supported_engines:
        raise UserError(f"this torch build has no {ENGINE} quantized engine for int8 decoding")
    torch.backends.quantized.engine = ENGINE
    with warnings.catch_warnings():
        # torch marks torch.ao.quantization deprecated (for torchao); it still works, and a user
        # of --quantize cannot act on the warning.
        warnings.filterwarnings("ignore", "torch.ao.quantization is deprecated")
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        # In place: the float32 linear weights are dropped, not kept beside the int8 copies.
        spec = {nn.Linear: per_channel_dynamic_qconfig}
        quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    left = [name for name, m in model.named_modules() if type(m) is nn.Linear]
    if left:  # a Linear subclass or a module quantize_dynamic skipped would stay float32
        raise RuntimeError(f"linear layers left in float32 after quantization: {left}")
    log.info("int8: %d linear layers quantized (engine %s)", len(quantized_linears(model)), ENGINE)
    return model


def quantized_linears(model: nn.Module) -> list[str]:
    """Names of `model`'s int8 dynamic linear layers."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return [name for name, m in model.named_modules() if isinstance(m, DynamicLinear)]
