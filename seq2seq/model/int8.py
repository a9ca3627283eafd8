"""int8 modules that hold one int8 copy of each weight, and int8 models built straight from int8
tensors (an `export --format int8` run) without a float32 weight ever being made.

What each piece keeps, and why (measured on the enfr-small shape, 7.6M parameters, d_model 256,
a joint 8,000-piece vocabulary, tied embeddings; RSS of a loaded model in a fresh process, as
`scripts/bench_int8.py` measures it: float32 39.4 MB):
- A linear layer (`Int8Linear`) multiplies on fbgemm's packed int8 matrix (`PackedLinearWeight`:
  the packed B matrix, column offsets and the per-row scales), not on the unpacked int8 tensor:
  built from a per-row qint8 tensor that is dropped once packed, it is the one copy. Its ints are
  the ones `quantize_dynamic` with the per-channel qconfig gives (same observer, same rounding).
- Activations get one scale per row, as CTranslate2's do, not torch's one per batch: each row is
  divided by its absolute maximum, quantized with the fixed range [-1, 1] (not one measured on
  the batch, which made a row's ints depend on its batch) and the product multiplied back. On
  CPUs with VNNI (no int16 saturation in the u8·s8 products) the activations keep 8 bits, not
  fbgemm's default 7 (`reduce_range`).
  enfr-small, 300 valid lines, outputs identical to float32 greedy / beam 4 (BLEU greedy,
  float32 22.42): torch's defaults 74.3% / 61.3% (21.71); 8 bits 84.3% / 74.0% (21.80); 8 bits
  per row 87.3% / 80.3% (22.10; 86.7-88.3% / 79.7-80.3%, 22.09-22.23 as the scale and bias
  were rounded other ways: a few lines' near-ties); CTranslate2 int8 83.0% / 78.7%. The row
  scaling costs three elementwise ops per layer (one thread, 128 rows, 256 → 256: 75 → 110 µs
  of CPU per layer):
  decoding 200 lines on one thread took 11-19% more CPU time greedy, 9-14% beam 4 (busy
  machine, process time, not a timed row).
- `quantize_dynamic` (used before) left each replaced float32 Linear in a reference cycle (its
  qconfig's closures), so their weights went back only at the next garbage collection: the int8
  model measured 52.5 MB, 1.34× float32. Modules built here are plain, replaced ones freed at once.
- Embedding tables are int8 rows with one float32 scale per row (the same symmetric per-row
  rounding as the linears), dequantized row by row on lookup.
- The output projection (`Int8Output`) multiplies on fbgemm's packed copy of its rows, as the
  linears do (per-row activation scales too). A tied one reads the
  target table's int8 rows (for a shortlist's subset) and keeps that packed copy beside them:
  fbgemm's packed layout cannot be gathered row by row for the embedding lookup, and the
  kernels that multiply plain int8 rows are slower. On 256 → 8,000, 2 threads, quiet machine:
  `torch._int_mm` with the activations quantized per batch took 1.15-2.1× fbgemm's time (95
  against 45 µs at 4 rows, 263 against 212 at 32, 1,029 against 895 at 128); torch's
  weight-only `_weight_int8pack_mm` was over 10× slower still (busy machine). Multiplying on
  the table's rows would save the copy (enfr-small int8 run 24.0 → 21.4 MB) at that speed.
- fbgemm's packed matrices take 5-40% more than their int8 rows (its blocking: 0.36 MB for a
  256 → 1,024 layer's 0.25 MB, 2.7 MB for the 1.95 MB output); onednn's packing is tighter but
  keeps the unpacked qint8 tensor beside it, two copies in all.
- Loading builds the model's frame with its parameters on the meta device (`frame_only`) and
  reads the weights file as views of the mapped file: an int8 run's rows go straight into the
  packed copies, a float32 checkpoint's tensors are quantized one at a time (`quantized_state`),
  and what the model keeps is copied out, so the file's pages go when loading ends. Building a
  float32 model and quantizing it left 27.5 MB; this leaves 26.0 MB from a float32 run and
  24.0 MB from an int8 run (float32 39.2 MB). About 9 MB of each figure is torch's own code
  that any first load touches; the anonymous memory (heap and tensors) is 29.9 MB float32,
  14.2 MB int8 from float32, 13.7 MB from an int8 run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn
from torch.ao.quantization import PerChannelMinMaxObserver
from torch.overrides import TorchFunctionMode

from seq2seq.errors import UserError
from seq2seq.model import compiled_step
from seq2seq.model.transformer import Transformer

ROWS, SCALE = "weight_int8", "weight_scale"  # an int8 matrix's tensors in a state dict


@contextmanager
def _quiet() -> Iterator[None]:
    """torch marks its quantized tensors and torch.ao.quantization deprecated (for torchao);
    they still work, and a user decoding int8 cannot act on the warnings."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.ao.quantization is deprecated")
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor")
        yield


class _Frame(TorchFunctionMode):
    """Parameters (`torch.empty`, as nn.Linear, nn.Embedding and nn.LayerNorm make them) on the
    meta device, their random initialisation skipped; everything else (the positional table) made
    as usual. Not `with torch.device("meta")`: torch has no C++ meta kernel for `normal_`,
    `arange` or the table's arithmetic, and its Python ones import 800 modules, 68 MB of the
    process, more than the int8 model itself."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty:
            return func(*args, **{**kwargs, "device": "meta"})
        if getattr(func, "__name__", None) in ("normal_", "uniform_", "trunc_normal_"):
            return args[0] if args else kwargs["tensor"]  # nn.init passes it by name
        return func(*args, **kwargs)


@contextmanager
def frame_only() -> Iterator[None]:
    """Models built inside are frames for `build_int8`: parameters on the meta device, unset."""
    with _Frame():
        yield


def quantize_rows(weight: torch.Tensor) -> torch.Tensor:
    """A float [rows, cols] matrix as qint8 with one symmetric scale per row (absmax / 127.5,
    round to nearest), as torch's per-channel dynamic qconfig quantizes a linear's weight."""
    observer = PerChannelMinMaxObserver(
        ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric
    )
    observer(weight.detach())
    scale, zero = observer.calculate_qparams()
    # Scales in float64 as torch's _quantize_weight passes them: same rounding, same ints.
    with _quiet():
        return torch.quantize_per_channel(
            weight.detach().float(), scale.double(), zero.long(), 0, torch.qint8
        )


def int8_rows(qweight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The int8 values and float32 per-row scales of a per-row qint8 matrix."""
    return qweight.int_repr(), qweight.q_per_channel_scales().float()


def qint8_matrix(rows: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A per-row qint8 tensor from int8 values and their scales (the inverse of `int8_rows`)."""
    zero = torch.zeros(rows.size(0), dtype=torch.long)
    with _quiet():
        return torch._make_per_channel_quantized_tensor(rows, scale.double(), zero, 0)


def int8_linear(qweight: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
    """An int8 linear layer holding only fbgemm's packed copy of `qweight` and the float32 bias."""
    return Int8Linear(qweight, None if bias is None else bias.detach().float())


class Int8Linear(nn.Module):
    """x · Wᵀ + b on fbgemm's packed int8 rows W (per-row scales), each row of x quantized to int8
    with its own scale on the fly; the packed matrix is the one copy of W kept."""

    def __init__(self, qweight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self._packed = _pack_qint8(qweight)  # a ScriptObject: no module, no state_dict entry
        self.register_buffer("bias", bias)
        self.out_features, self.in_features = qweight.shape
        self.per_row = True  # activation scales: one per row (else one per batch)
        self.name = "?"  # its name in the model, for errors (name_layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _packed_product(x, self._packed, self.bias, self.per_row, self.name)

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The int8 rows [out, in] and their float32 scales [out], unpacked."""
        weight, _ = torch.ops.quantized.linear_unpack(self._packed)
        return int8_rows(weight)

    def extra_repr(self) -> str:
        shape = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"{shape}, bias={self.bias is not None}, int8"


class Int8Embedding(nn.Module):
    """An embedding table as int8 rows with one float32 scale each; lookups come out float32."""

    def __init__(self, rows: torch.Tensor, scale: torch.Tensor, padding_idx: int | None = None):
        super().__init__()
        self.register_buffer(ROWS, rows)
        self.register_buffer(SCALE, scale)
        self.num_embeddings, self.embedding_dim = rows.shape
        self.padding_idx = padding_idx

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # int8 × float32 promotes to float32 (exactly): one op fewer than .float() first.
        return torch.mul(self.weight_int8[ids], self.weight_scale[ids].unsqueeze(-1))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 rows"


class Int8Output(nn.Module):
    """The pre-softmax projection on int8 rows [V, d] with per-row scales: forward(x) = x · Wᵀ,
    forward_rows(x, rows) = forward(x)[..., rows] computed on those rows only.

    The product runs on fbgemm's packed copy of the rows (a dynamic int8 Linear, as every other
    layer). Tied, the rows themselves are the target embedding's tensors (not buffers here, so
    stored once); untied, only the packed copy is kept and the rows are unpacked when asked for.
    """

    def __init__(self, rows: torch.Tensor, scale: torch.Tensor, *, tied: bool):
        super().__init__()
        self.tied = tied
        self._packed = _pack(rows, scale)  # a ScriptObject: no module, no state_dict entry
        self._tied_rows = (rows, scale) if tied else None
        self.out_features, self.in_features = rows.shape
        self._subset: tuple[torch.Tensor, torch.ScriptObject] | None = None
        self.per_row = True  # activation scales: one per row (else one per batch)
        self.name = "?"  # its name in the model, for errors (name_layers)

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The int8 rows [V, d] and their float32 scales [V]."""
        if self._tied_rows is not None:
            return self._tied_rows
        weight, _ = torch.ops.quantized.linear_unpack(self._packed)
        return int8_rows(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _packed_product(x, self._packed, None, self.per_row, self.name)

    def forward_rows(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """forward(x)[..., rows], on a packed copy of those rows only (kept while `rows` is the
        same tensor: a shortlisted batch asks with one `rows` every step)."""
        if self._subset is None or self._subset[0] is not rows:
            self._subset = None  # the last batch's copy goes before this one is made
            ints, scale = self.rows()
            self._subset = (rows, _pack(ints[rows], scale[rows]))
        return _packed_product(x, self._subset[1], None, self.per_row, self.name)

    def extra_repr(self) -> str:
        tied = ", tied to the target embedding" if self.tied else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8{tied}"


def _pack(rows: torch.Tensor, scale: torch.Tensor) -> torch.ScriptObject:
    return _pack_qint8(qint8_matrix(rows, scale))


def _pack_qint8(qweight: torch.Tensor) -> torch.ScriptObject:
    # No bias in the packed weight: it is added after the rows' scales are multiplied back.
    return torch.ops.quantized.linear_prepack(qweight, None)


def _vnni() -> bool:
    """Whether this CPU has AVX-512 VNNI (fbgemm's u8·s8 products accumulate without saturating)."""
    probe = getattr(torch.cpu, "_is_vnni_supported", None)  # private: absent means "assume not"
    return bool(probe and probe())


# fbgemm keeps activations to 7 bits by default because AVX2's u8·s8 pair sums saturate int16
# at 8 bits; VNNI's dot products accumulate in int32, so 8 bits are safe there.
REDUCE_RANGE = not _vnni()
TINY = 1e-30  # an all-zero row's scale: the row stays zero instead of dividing by zero


def row_qparams(reduce_range: bool) -> tuple[float, int]:
    """The uint8 (scale, zero point) fbgemm's dynamic linear picks for a batch spanning exactly
    [-1, 1] (its ChooseQuantizationParams: 2 / qmax, qmax / 2 rounded half to even): the range
    of every input once each row is divided by its absolute maximum."""
    qmax = 127 if reduce_range else 255
    return 2.0 / qmax, round(qmax / 2)


ROW_QPARAMS = row_qparams(REDUCE_RANGE)


def _packed_product(
    x: torch.Tensor,
    packed: torch.ScriptObject,
    bias: torch.Tensor | None,
    per_row: bool,
    name: str = "?",
) -> torch.Tensor:
    """x · Wᵀ (+ bias) with one activation scale per row of x, else fbgemm's one for the batch;
    a non-finite input is a UserError naming the layer (`name`).

    Per row, each row is divided by its absolute maximum and quantized with the fixed range
    [-1, 1], not one fbgemm measures on the batch: a range measured on the batch depends on the
    other rows (a row alone, its largest value positive, spans [min, 1]; beside rows whose
    largest is negative, [-1, 1]), and so did the int8 values of a row and the translation of a
    line alone and in a batch. With the range fixed, fbgemm's integer product and its float
    epilogue are per row: a row's output is bitwise the same in any batch. With the compiled
    step built, the same arithmetic runs in its fused loops (compiled_step.int8_product)."""
    fused = compiled_step.int8_product(x, packed, bias, per_row, ROW_QPARAMS, REDUCE_RANGE)
    if fused is not None:
        if not fused[1]:
            raise _non_finite(name)
        return fused[0]
    if not per_row:
        _check_finite(x.abs(), name)
        product = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=REDUCE_RANGE)
        return product if bias is None else product.add_(bias)
    scale = x.abs().amax(-1, keepdim=True)
    _check_finite(scale, name)
    scale.clamp_min_(TINY)
    product = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        x / scale, *ROW_QPARAMS, packed
    )
    # One op for the scale and the bias: each op costs microseconds at a decoding step's size.
    return product.mul_(scale) if bias is None else torch.addcmul(bias, product, scale)


def _check_finite(magnitudes: torch.Tensor, name: str) -> None:
    # One value read back: max() carries a NaN or an inf through.
    if magnitudes.numel() and not math.isfinite(magnitudes.max().item()):
        raise _non_finite(name)


def _non_finite(name: str) -> UserError:
    return UserError(
        f"int8 layer {name}: non-finite activation (inf/NaN) in its input; the model's "
        f"float32 activations overflow or its weights are damaged (try --quantize none)"
    )


def name_layers(model: nn.Module) -> None:
    """Give every int8 linear and output layer of `model` its name, for its error messages."""
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear | Int8Output):
            module.name = name


def use_activation_scales(model: nn.Module, per_row: bool) -> int:
    """Quantize every int8 layer's input with one scale per row, or one per batch (fbgemm's
    own: no extra operator, so faster, but fewer outputs equal float32's); layers set."""
    layers = [m for m in model.modules() if isinstance(m, Int8Linear | Int8Output)]
    for layer in layers:
        layer.per_row = per_row
    return len(layers)


def convert_linears(model: nn.Module, skip: set[str]) -> list[str]:
    """Replace every nn.Linear of `model` (names in `skip` aside) by an int8 one, in place."""
    names = [n for n, m in model.named_modules() if type(m) is nn.Linear and n not in skip]
    for name in names:
        float_linear = model.get_submodule(name)
        _replace(model, name, int8_linear(quantize_rows(float_linear.weight), float_linear.bias))
    return names


def convert_embeddings(model: Transformer) -> None:
    """int8 source and target tables and output projection (tied or shared ones converted once)."""
    tied = model.output.weight is model.tgt_embed.weight
    tables: dict[int, Int8Embedding] = {}
    for name in ("src_embed", "tgt_embed"):
        table = getattr(model, name)
        if id(table) not in tables:
            rows, scale = int8_rows(quantize_rows(table.weight))
            tables[id(table)] = Int8Embedding(rows, scale, table.padding_idx)
        setattr(model, name, tables[id(table)])
    if tied:
        target = model.tgt_embed
        model.output = Int8Output(target.weight_int8, target.weight_scale, tied=True)
    else:
        model.output = Int8Output(*int8_rows(quantize_rows(model.output.weight)), tied=False)


def int8_state(model: Transformer) -> dict[str, torch.Tensor]:
    """Every tensor an int8 model is rebuilt from, each stored once: int8 rows and their scales,
    float32 biases, norms and fixed biases (see `build_int8`)."""
    state: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():  # a shared table comes once, under its first name
        if isinstance(module, Int8Linear):
            state[f"{name}.{ROWS}"], state[f"{name}.{SCALE}"] = module.rows()
            if module.bias is not None:
                state[f"{name}.bias"] = module.bias
        elif isinstance(module, Int8Embedding):
            state[f"{name}.{ROWS}"] = module.weight_int8
            state[f"{name}.{SCALE}"] = module.weight_scale
        elif isinstance(module, Int8Output) and not module.tied:
            state[f"{name}.{ROWS}"], state[f"{name}.{SCALE}"] = module.rows()
    int8 = tuple(f"{n}." for n, _ in _int8_modules(model))
    for name, tensor in model.state_dict().items():
        if not name.startswith(int8) and isinstance(tensor, torch.Tensor):
            state[name] = tensor
    return {k: v.contiguous() for k, v in state.items()}


def quantized_state(
    frame: Transformer, weights: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`int8_state` of the model whose float32 `weights` are given (a checkpoint's: tied tensors
    stored once, under any of their names), quantized one tensor at a time, so that no float32
    model is built; raises KeyError or ValueError when they do not fit `frame`."""
    aliases: dict[int, list[str]] = {}
    for name, tensor in frame.state_dict(keep_vars=True).items():
        aliases.setdefault(id(tensor), []).append(name)
    names = {name: group for group in aliases.values() for name in group}
    extra = sorted(set(weights) - set(names))
    if extra:
        raise ValueError(f"not tensors of this model: {', '.join(extra[:5])}")

    def get(name: str) -> torch.Tensor:
        found = [weights[n] for n in names[name] if n in weights]
        if not found:
            raise KeyError(f"missing from the weights: {name}")
        return found[0]

    state: dict[str, torch.Tensor] = {}
    tables = ["src_embed", "tgt_embed"] if frame.src_embed is not frame.tgt_embed else ["src_embed"]
    if frame.output.weight is not frame.tgt_embed.weight:
        tables.append("output")
    linears = [n for n, m in frame.named_modules() if type(m) is nn.Linear and n != "output"]
    for name in [*linears, *tables]:
        expected = frame.get_submodule(name).weight
        weight = get(f"{name}.weight")
        _check_shape(name, weight, expected)
        state[f"{name}.{ROWS}"], state[f"{name}.{SCALE}"] = int8_rows(quantize_rows(weight))
    skip = tuple(f"{n}." for n in [*linears, *tables, "tgt_embed", "output"])
    for name, tensor in frame.state_dict(keep_vars=True).items():
        bias = name.endswith(".bias") and name.rpartition(".")[0] in linears
        if bias or not name.startswith(skip):
            value = get(name)
            _check_shape(name, value, tensor)
            state[name] = value
    return state


def _int8_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    kinds = (Int8Linear, Int8Embedding, Int8Output)
    found = model.named_modules(remove_duplicate=False)
    return [(name, m) for name, m in found if isinstance(m, kinds)]


def build_int8(skeleton: Transformer, tensors: Mapping[str, torch.Tensor]) -> Transformer:
    """An int8 model from `int8_state`'s tensors, on a skeleton built under `frame_only` (no
    float32 weights allocated); raises KeyError or ValueError when they do not fit it.

    `tensors` may be views of a mapped file: the linears' rows are read once, into fbgemm's
    packed copies, and every tensor the model keeps is copied out, so the file can go."""
    model = skeleton
    linears = [n for n, m in model.named_modules() if type(m) is nn.Linear and n != "output"]
    biases = {f"{n}.bias" for n in linears if model.get_submodule(n).bias is not None}
    floats = {
        k: v.clone()
        for k, v in tensors.items()
        if k not in biases and k.rpartition(".")[2] not in (ROWS, SCALE)
    }
    _, unexpected = model.load_state_dict(floats, strict=False, assign=True)
    used = set(floats) - set(unexpected) | biases
    for name in linears:
        qweight = qint8_matrix(tensors[f"{name}.{ROWS}"], tensors[f"{name}.{SCALE}"])
        _check_shape(name, qweight, model.get_submodule(name).weight)
        bias = tensors[f"{name}.bias"].clone() if f"{name}.bias" in biases else None
        _replace(model, name, int8_linear(qweight, bias))
        used |= {f"{name}.{ROWS}", f"{name}.{SCALE}"}
    used |= _build_tables(model, tensors)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise KeyError(f"missing from the int8 weights: {', '.join(left[:5])}")
    extra = sorted(set(tensors) - used)
    if extra:
        raise ValueError(f"not tensors of this model: {', '.join(extra[:5])}")
    name_layers(model)
    return model.eval()


def _build_tables(model: Transformer, tensors: Mapping[str, torch.Tensor]) -> set[str]:
    """Put the int8 tables and output layer in; returns the names of the tensors used."""
    tied = model.output.weight is model.tgt_embed.weight
    shared = model.src_embed is model.tgt_embed
    used = set()
    for name in ("src_embed",) if shared else ("src_embed", "tgt_embed"):
        table = getattr(model, name)
        rows, scale = tensors[f"{name}.{ROWS}"].clone(), tensors[f"{name}.{SCALE}"].clone()
        _check_shape(name, rows, table.weight)
        setattr(model, name, Int8Embedding(rows, scale, table.padding_idx))
        used |= {f"{name}.{ROWS}", f"{name}.{SCALE}"}
    if shared:
        model.tgt_embed = model.src_embed
    if tied:
        target = model.tgt_embed
        model.output = Int8Output(target.weight_int8, target.weight_scale, tied=True)
    else:
        rows, scale = tensors[f"output.{ROWS}"], tensors[f"output.{SCALE}"]
        _check_shape("output", rows, model.output.weight)
        model.output = Int8Output(rows, scale, tied=False)  # packed: a copy
        used |= {f"output.{ROWS}", f"output.{SCALE}"}
    return used


def _check_shape(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    if tuple(got.shape) != tuple(expected.shape):
        raise ValueError(f"{name}: int8 weights {list(got.shape)}, model {list(expected.shape)}")


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)
