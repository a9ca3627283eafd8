"""The decoder step's layer loop compiled: one C++ call over the ATen operators the Python step
calls, in its order and on its shapes (`csrc/decoder_step.cpp`), but for attention, which is its
own loop (`csrc/step_attention.h`, faster than SDPA for one query): outputs are the Python step's
to float32 rounding, and the Python and module calls between operators go. Without a shortlist
the call ends with the output layer; `select` gives search what it reads of the logits in one
pass (`csrc/step_select.h`), and `int8_product` an int8 linear outside the step (`int8_rows.h`).

`make install` builds it (`python -m seq2seq.model.compiled_step`, through
`torch.utils.cpp_extension`) into `_build/` beside this file; nothing compiles at run time. Without
a build (no compiler, another torch, a changed source) the Python step runs, after one warning.
Only for inference on CPU with plain or oneDNN-packed float32 linears (`packed.py`) or int8 ones
(`int8.py`, fbgemm); training and autograd take the Python step.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.errors import UserError

log = logging.getLogger(__name__)

NAME = "seq2seq_decoder_step"
SOURCE = Path(__file__).parent / "csrc" / "decoder_step.cpp"
# torch ships fbgemm's headers without asmjit's, which one of them names: declarations in stub/
STUB = SOURCE.parent / "stub"
HEADERS = [
    SOURCE.parent / "int8_rows.h",
    SOURCE.parent / "step_attention.h",
    SOURCE.parent / "step_select.h",
    STUB / "asmjit" / "core.h",
    STUB / "asmjit" / "x86.h",
]
BUILD = Path(__file__).parent / "_build"
# Set to 0 to decode on the Python step although the compiled one is built (comparisons).
SWITCH = "SEQ2SEQ_COMPILED_STEP"
ACTIVATION_CODES = {F.relu: 0, F.gelu: 1, F.silu: 2}
NO_WEIGHT = torch.empty(0)  # an int8 linear's slot in the weights: its rows are in the packs
NO_ORIGIN = torch.empty(0, dtype=torch.long)  # a cache whose rows hold their own positions


@dataclass(frozen=True)
class StepPlan:
    """What the compiled step takes of a model: its weights in order and its shape."""

    weights: list[torch.Tensor]
    packed: bool
    heads: int
    norm_first: bool
    activation: int
    eps: float
    int8: Int8Plan | None = None
    head: Head | None = None  # the output layer, when the step can end with it


@dataclass(frozen=True)
class Int8Plan:
    """The int8 step's part (model/int8.py): fbgemm's packed rows, how inputs are quantized, and
    the linears' names for a non-finite input's message."""

    packs: list
    per_row: bool
    row_scale: float
    row_zero: int
    reduce_range: bool
    names: list[str]
    # The same with the output layer's pack (and name) last, for a step that ends with it.
    packs_and_head: list
    names_and_head: list[str]


@dataclass(frozen=True)
class Head:
    """The output layer the step ends with (Transformer.logits, no shortlist): its kind (1
    nn.Linear's weight, 2 oneDNN-packed; 0 int8, its fbgemm `pack`), weight and the model's
    final_logits_bias (empty: none)."""

    kind: int
    weight: torch.Tensor
    bias: torch.Tensor
    pack: object = None
    name: str = ""


def stamp() -> str:
    """What a build must have been made from: this torch and this source (its headers too)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [SOURCE, *HEADERS])).hexdigest()[:16]
    return f"torch {torch.__version__} source {digest}"


def build(folder: Path) -> Path:
    """Compile the step into `folder` and return the library's path (raises when it cannot)."""
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise FileNotFoundError(f"no C++ compiler: {compiler!r} is not on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stamp").unlink(missing_ok=True)
    cpp_extension.load(
        NAME,
        [str(SOURCE)],
        extra_cflags=["-O3"],
        extra_include_paths=[str(STUB)],
        build_directory=str(folder),
        is_python_module=False,
        verbose=False,
    )
    (folder / "stamp").write_text(stamp())
    return folder / f"{NAME}.so"


@functools.cache
def library(folder: Path) -> str | None:
    """Load the built step once per process: None when it is loaded, else why not (warned once)."""
    why = _unusable(folder)
    if why is None:
        try:
            torch.ops.load_library(str(folder / f"{NAME}.so"))
        except (OSError, RuntimeError) as e:
            why = f"its library would not load ({e.__class__.__name__}: {str(e)[:120]})"
    if why is not None:
        log.warning("decoding on the Python decoder step, not the compiled one: %s", why)
    return why


def _unusable(folder: Path) -> str | None:
    if not (folder / f"{NAME}.so").is_file():
        return "it is not built (`make install` builds it where a C++ compiler is found)"
    made = (folder / "stamp").read_text() if (folder / "stamp").is_file() else "unknown"
    if made != stamp():
        return f"it was built from another torch or source ({made}; now {stamp()}): `make install`"
    return None


def plan(model: nn.Module) -> StepPlan | None:
    """The compiled step's arguments for `model`, or None when it must take the Python step."""
    if os.environ.get(SWITCH, "1") == "0" or model.training:
        return None
    layers = list(model.decoder_layers)
    first = next(model.parameters(), None)
    if not layers or first is None or first.device.type != "cpu":
        return None
    try:  # a layer laid out otherwise (another architecture) takes the Python step
        activation = ACTIVATION_CODES.get(layers[0].ffn.activation)
        linears = [_linear(m) for layer in layers for m in _linears(layer)]
        norms = [_norm(m) for layer in layers for m in _norms(layer)]
        final = model.decoder_norm
    except AttributeError:
        return None
    if not isinstance(final, nn.Identity):
        norms.append(_norm(final))
    kinds = {kind for kind, *_ in linears}
    eps = {e for e, *_ in norms}
    if activation is None or None in kinds | eps or len(kinds) != 1 or len(eps) != 1:
        return None
    if any(layer.ffn.activation is not layers[0].ffn.activation for layer in layers):
        return None
    if library(BUILD) is not None:
        return None
    kind, cfg = kinds.pop(), model.cfg
    weights = _weights(linears, norms, len(layers))
    head = _head(model.output, kind, getattr(model, "final_logits_bias", None))
    int8 = _int8_plan(linears, kind, head) if kind.startswith("int8") else None
    shape = (cfg.heads, cfg.norm_first, activation, *eps)
    return StepPlan(weights, kind == "packed", *shape, int8=int8, head=head)


def _head(output: nn.Module, kind: str, bias: torch.Tensor | None) -> Head | None:
    """The output layer as the step computes it, or None (the Python `logits` then runs)."""
    bias = NO_WEIGHT if bias is None else bias
    if bias.dtype != torch.float32:
        return None
    name = type(output).__name__
    if type(output) is nn.Linear and output.bias is None:
        return Head(1, output.weight, bias)
    if name == "PackedLinear" and getattr(output, "bias", None) is None:
        return Head(2, output.packed, bias)
    pack, per_row = getattr(output, "_packed", None), getattr(output, "per_row", None)
    if name == "Int8Output" and isinstance(pack, torch.ScriptObject) and kind.startswith("int8"):
        if per_row == (kind == "int8-row"):  # the layers' activation scales
            return Head(0, NO_WEIGHT, bias, pack, output.name)
    return None


def _weights(linears: list[tuple], norms: list[tuple], layers: int) -> list[torch.Tensor]:
    """Per layer and block: the norm's weight and bias, then its two linears' weights and biases;
    the final norm's last."""
    weights = []
    for i in range(layers):
        for k in range(3):
            weights += [*norms[3 * i + k][1:], *linears[6 * i + 2 * k][1:3]]
            weights += linears[6 * i + 2 * k + 1][1:3]
    if len(norms) > 3 * layers:
        weights += norms[-1][1:]
    return weights


def _int8_plan(linears: list[tuple], kind: str, head: Head | None) -> Int8Plan:
    # int8.py's row_qparams: fbgemm's uint8 range for inputs spanning [-1, 1], 7 bits without
    # AVX-512 VNNI (the compiled-step tests hold the two to the same products).
    probe = getattr(torch.cpu, "_is_vnni_supported", None)
    reduce_range = not (probe and probe())
    qmax = 127 if reduce_range else 255
    packs, names = [p for *_, p, _ in linears], [n for *_, n in linears]
    last = ([head.pack], [head.name]) if head is not None else ([], [])
    qparams = (kind == "int8-row", 2.0 / qmax, round(qmax / 2), reduce_range)
    return Int8Plan(packs, *qparams, names, packs + last[0], names + last[1])


def _linears(layer: nn.Module) -> list[nn.Module]:
    """A decoder layer's linears in the step's order, two a block."""
    a, c, f = layer.self_attn, layer.cross_attn, layer.ffn
    return [a.qkv_proj, a.out_proj, c.q_proj, c.out_proj, f.up, f.down]


def _norms(layer: nn.Module) -> list[nn.Module]:
    return [layer.self_block.norm, layer.cross_block.norm, layer.ffn_block.norm]


def _linear(m: nn.Module) -> tuple:
    """(kind, weight, bias, int8 pack, name): kind None when the step cannot compute it."""
    bias = getattr(m, "bias", None)
    if not isinstance(bias, torch.Tensor) or bias.dtype != torch.float32:
        return (None,)
    kind = type(m).__name__
    if type(m) is nn.Linear:
        return ("plain", m.weight, bias, None, "")
    packed = getattr(m, "packed", None)
    if isinstance(packed, torch.Tensor) and kind == "PackedLinear":
        return ("packed", packed, bias, None, "")
    pack, per_row = getattr(m, "_packed", None), getattr(m, "per_row", None)
    if kind == "Int8Linear" and isinstance(pack, torch.ScriptObject) and per_row is not None:
        return ("int8-row" if per_row else "int8-batch", NO_WEIGHT, bias, pack, m.name)
    return (None,)


def _norm(m: nn.Module) -> tuple:
    """(eps, weight, bias) of a LayerNorm over the last dimension, eps None otherwise."""
    if type(m) is not nn.LayerNorm or m.weight is None or m.bias is None:
        return (None,)
    return (m.eps, m.weight, m.bias)


def run(step: StepPlan, x: torch.Tensor, cache, logits: bool = False) -> torch.Tensor:
    """The layers and the final norm for one new position `x` [N, 1, d] at `cache.length`,
    then with `logits` (and a `step.head`) the output layer: logits [N, 1, V]."""
    state = (x, cache.kv, cache.rows, cache.length, cache.cross_k, cache.cross_v, cache.query_mask)
    origin = NO_ORIGIN if cache.origin is None else cache.origin
    shape = (step.heads, step.norm_first, step.activation, step.eps, origin)
    head = step.head if logits else None
    if step.int8 is None:
        out = (0, NO_WEIGHT, NO_WEIGHT) if head is None else (head.kind, head.weight, head.bias)
        layers = (step.weights, step.packed, *shape, *out)
        return torch.ops.seq2seq_step.decoder_layers(*state, *layers)
    q = step.int8
    packs, names = (q.packs, q.names) if head is None else (q.packs_and_head, q.names_and_head)
    quantized = (packs, q.per_row, q.row_scale, q.row_zero, q.reduce_range)
    bias = NO_WEIGHT if head is None else head.bias
    out, bad = torch.ops.seq2seq_step.decoder_layers_int8(
        *state, step.weights, *quantized, *shape, bias
    )
    if bad >= 0:  # int8.py's _check_finite, word for word
        raise UserError(
            f"int8 layer {names[bad]}: non-finite activation (inf/NaN) in its input; the "
            f"model's float32 activations overflow or its weights are damaged (try --quantize none)"
        )
    return out


def select(
    logits: torch.Tensor, never: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of `logits` [N, V]: logsumexp over every column, then the `never` columns set to
    -inf (in place), then the `width` best values and columns, best first (`csrc/step_select.h`;
    only with the library loaded: a plan was made)."""
    return torch.ops.seq2seq_step.select(logits, never, width)


def int8_product(
    x: torch.Tensor, pack, bias: torch.Tensor | None, per_row: bool, qparams: tuple, reduce: bool
) -> tuple[torch.Tensor, bool] | None:
    """int8.py's product of `x` with an fbgemm `pack` (+ `bias`; its row (scale, zero) and
    reduce_range) in the library's fused loops (`csrc/int8_rows.h`, bit-identical): (product,
    whether `x` was finite), or None where the library is not loaded or switched off."""
    if os.environ.get(SWITCH, "1") == "0" or library(BUILD) is not None or x.requires_grad:
        return None
    bias = NO_WEIGHT if bias is None else bias
    return torch.ops.seq2seq_step.int8_product(x, pack, bias, per_row, *qparams, reduce)


def main(folder: Path | None = None) -> int:
    """Build the step; without a compiler, say so once and succeed (the Python step runs)."""
    try:
        path = build(folder or BUILD)
    except Exception as e:  # noqa: BLE001 - any failure to compile means the fallback
        print(
            f"warning: the compiled decoder step was not built ({e.__class__.__name__}: "
            f"{str(e).strip()[:200]}); decoding will use the Python step",
            file=sys.stderr,
        )
        return 0
    print(f"compiled decoder step: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
