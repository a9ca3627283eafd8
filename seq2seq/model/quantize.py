"""int8 decoding on CPU: a model's weights as int8, activations quantized to int8 on the fly in
the linear layers, one scale per row (fbgemm's int8 kernels, through torch's x86 engine).

Every linear layer is int8 (attention projections, FFN), and so are the embedding tables (int8
rows, one scale per row) and the output projection, which for tied embeddings reads the target
table's int8 rows (`model/int8.py` says what each keeps and why, with the measurements). Layer
norms, biases, the positional table and `final_logits_bias` stay float32, and so do the
activations between layers, so the KV cache and the search are unchanged. A float32 run is
quantized as it loads, one tensor at a time (`run.rundir.int8_model`; its checkpoints stay
float32, `train --init-from` reads them as ever); `seq2seq export --format int8` writes a run
directory of int8 weights that loads straight into the int8 model, no float32 weight ever made.
`quantize_int8` makes the same int8 model of a float32 one already in memory.
"""

from __future__ import annotations

import ctypes
import logging

import torch
from torch import nn

from seq2seq.errors import UserError
from seq2seq.model.int8 import Int8Linear, convert_embeddings, convert_linears, name_layers
from seq2seq.model.transformer import Transformer

log = logging.getLogger(__name__)

# x86 is torch's default CPU engine (fbgemm's AVX2/AVX-512/VNNI kernels for dynamic linears).
# fbgemm and onednn, on enfr-small (300 valid lines, AVX-512 VNNI, torch's one activation scale
# per batch), gave no better agreement with float32: fbgemm the same outputs as x86, onednn
# 73.3% / 64.7% identical greedy / beam 4 against x86's 74.3% / 61.3%. One scale per weight row
# (per channel), as CTranslate2 does: on a half-trained demo model, beam 4 on 200 lines, 92% of
# the outputs equal float32's, against 88.5% with one scale per matrix; the GEMM is the same
# either way.
ENGINE = "x86"


def int8_device(device: str) -> str:
    """The device an int8 model loads on: CPU (`auto` means CPU for it); CUDA is refused."""
    if device in ("auto", "cpu"):
        return "cpu"
    raise UserError(
        f"--quantize int8 is a CPU path (torch dynamic int8 quantization); it cannot run on "
        f"{device!r}: use --device cpu, or --quantize none on the GPU"
    )


def quantize_int8(model: Transformer) -> Transformer:
    """Make `model` (on CPU) int8 in place: every nn.Linear, the embeddings, the output layer."""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("int8 quantization is a CPU path; load the model on CPU")
    use_int8_engine()
    convert_embeddings(model)
    names = convert_linears(model, skip={"output"})
    name_layers(model)
    left = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if left:  # a Linear subclass would stay float32
        raise RuntimeError(f"linear layers left in float32 after quantization: {left}")
    release_freed_memory()
    log.info("int8: %d linear layers and the embeddings quantized (engine %s)", len(names), ENGINE)
    return model


def use_int8_engine() -> None:
    """Select the quantized engine the int8 linears run on, or say this torch has none."""
    if ENGINE not in torch.backends.quantized.supported_engines:
        raise UserError(f"this torch build has no {ENGINE} quantized engine for int8 decoding")
    torch.backends.quantized.engine = ENGINE


def release_freed_memory() -> None:
    """Hand the heap pages of freed float32 weights back to the system (glibc keeps them
    otherwise, and the process stays as large as the float32 model was)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to trim
        return
    libc.malloc_trim(0)


def quantized_linears(model: nn.Module) -> list[str]:
    """Names of `model`'s int8 linear layers."""
    return [name for name, m in model.named_modules() if isinstance(m, Int8Linear)]
