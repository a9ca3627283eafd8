// The decoder's layer loop for one new position, as one C++ function over the same ATen calls
// the Python step makes (seq2seq/model/transformer.py: DecoderLayer.step, MultiHeadAttention.step
// and step_cross, FeedForward, Residual, then decoder_norm), in the same order and on the same
// shapes, but for attention (step_attention.h: SDPA's maths in a loop made for one query), so
// float32 results are the Python step's to rounding; what goes is the Python between operators.
// Built by `make install` (seq2seq/model/compiled_step.py); without it the Python step runs.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include "int8_rows.h"
#include "step_attention.h"
#include "step_select.h"

#include <cmath>
#include <functional>

namespace {

constexpr int64_t kPerLayer = 18;  // tensors a layer hands in, in compiled_step.layer_weights' order

using LinearPointwise = at::Tensor(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
    c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>);

struct Shape {
  int64_t heads;
  bool norm_first;
  int64_t activation;  // 0 relu, 1 gelu (erf), 2 silu
  double eps;
  bool packed;  // weights are oneDNN-packed (model/packed.py), else nn.Linear's
};

// A layer's k-th linear (0 qkv, 1 self out, 2 cross q, 3 cross out, 4 up, 5 down) of layer i.
using Linear = std::function<at::Tensor(const at::Tensor&, int64_t slot)>;

// Whether an optional tensor argument was given (Python passes an empty tensor for none).
bool given(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

// x · Wᵀ + b on nn.Linear's weight or oneDNN's packed one; an empty `b` is no bias.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool packed) {
  const std::optional<at::Tensor> bias = given(b) ? std::optional<at::Tensor>(b) : std::nullopt;
  if (!packed) {
    return at::linear(x, w, bias);
  }
  // PackedLinear.forward's call, through the dispatcher as torch.ops makes it.
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                       .typed<LinearPointwise>();
  return op.call(x, w, bias, "none", c10::List<std::optional<at::Scalar>>(),
                 c10::string_view(""));
}

at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Shape& s) {
  return at::layer_norm(x, {x.size(-1)}, w, b, s.eps);
}

at::Tensor activate(const at::Tensor& x, const Shape& s) {
  if (s.activation == 1) {
    return at::gelu(x, "none");
  }
  return s.activation == 2 ? at::silu(x) : at::relu(x);
}

// MultiHeadAttention.step: position t's key and value written into row n of kv [R, 2, H, cap,
// d_head], then its query over positions 0..t (step_attention.h, not SDPA: same maths, its own
// rounding), each read from the row `origin` names (empty: row n itself).
at::Tensor self_attention(
    const at::Tensor& x, const at::Tensor& kv, int64_t t, const at::Tensor& origin,
    const Linear& lin, int64_t slot, const Shape& s) {
  const int64_t d = x.size(-1), n = x.size(0);
  auto projected = lin(x, slot);
  kv.slice(0, 0, n).select(3, t).copy_(projected.view({n, 3, s.heads, d / s.heads}).slice(1, 1));
  auto k = kv.select(1, 0).slice(2, 0, t + 1);
  auto v = kv.select(1, 1).slice(2, 0, t + 1);
  auto q = projected.view({n, 1, 3 * d}).narrow(2, 0, d);
  return lin(step_attention::attend_through(q, k, v, {}, s.heads, origin), slot + 1);
}

// MultiHeadAttention.step_cross: a sentence's beams attend as `beam` queries over its keys.
at::Tensor cross_attention(
    const at::Tensor& x, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
    const Linear& lin, int64_t slot, const Shape& s) {
  const int64_t d = x.size(-1), n = k.size(0);
  auto q = lin(x, slot).view({n, -1, d});
  auto y = step_attention::attend(q, k, v, mask.select(1, 0), s.heads);
  return lin(y, slot + 1).view(x.sizes());
}

// Residual: pre-norm x + f(norm(x)), post-norm norm(x + f(x)).
template <typename F>
at::Tensor residual(const at::Tensor& x, const at::Tensor* n, const Shape& s, F f) {
  if (s.norm_first) {
    return x + f(norm(x, n[0], n[1], s));
  }
  return norm(x + f(x), n[0], n[1], s);
}

// `origin` [rows, cap] int64: the kv row holding each hypothesis's positions (DecoderCache's
// beam reorders move these indices, not the keys); position t, written now, is its own row's.
// Empty: each hypothesis's positions are all in its own row.
at::Tensor layer_loop(
    const at::Tensor& x_in, const at::Tensor& kv, int64_t rows, int64_t t,
    at::TensorList cross_k, at::TensorList cross_v, const at::Tensor& mask,
    at::TensorList weights, const Shape& s, const Linear& lin, const at::Tensor& origin) {
  const int64_t layers = static_cast<int64_t>(cross_k.size());
  const int64_t own = kPerLayer * layers;
  const int64_t given = static_cast<int64_t>(weights.size());
  TORCH_CHECK(given == own || given == own + 2, "decoder_layers: ", given, " weights for ", layers,
              " layers");
  const bool through = origin.numel() > 0;
  if (through) {
    TORCH_CHECK(origin.scalar_type() == at::kLong && origin.size(0) >= rows &&
                    origin.size(1) > t && origin.stride(1) == 1,
                "decoder_layers: origin [rows, capacity] int64");
    auto* o = origin.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) o[r * origin.stride(0) + t] = r;
  }
  auto live = through ? kv : kv.slice(0, 0, rows);
  auto held = through ? origin.slice(0, 0, rows) : origin;
  at::Tensor x = x_in;
  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor* w = weights.data() + kPerLayer * i;
    const int64_t slot = 6 * i;
    auto cache = live.select(1, i);
    x = residual(x, w, s, [&](const at::Tensor& h) {
      return self_attention(h, cache, t, held, lin, slot, s);
    });
    x = residual(x, w + 6, s, [&](const at::Tensor& h) {
      return cross_attention(h, cross_k[i], cross_v[i], mask, lin, slot + 2, s);
    });
    x = residual(x, w + 12, s, [&](const at::Tensor& h) {
      return lin(activate(lin(h, slot + 4), s), slot + 5);
    });
  }
  return given == own + 2 ? norm(x, weights[own], weights[own + 1], s) : x;
}

// The weights' linear slots: W and b of linear k of layer i sit at 18 i + {2, 4, 8, 10, 14, 16}.
int64_t weight_index(int64_t slot) {
  static const int64_t at_[6] = {2, 4, 8, 10, 14, 16};
  return kPerLayer * (slot / 6) + at_[slot % 6];
}

// The output layer's kinds (`out_kind`): none (the states are returned), nn.Linear's weight,
// oneDNN's packed one.
enum OutKind : int64_t { kNoOutput = 0, kPlainOutput = 1, kPackedOutput = 2 };

at::Tensor decoder_layers(
    const at::Tensor& x, const at::Tensor& kv, int64_t rows, int64_t t,
    at::TensorList cross_k, at::TensorList cross_v, const at::Tensor& mask,
    at::TensorList weights, bool packed, int64_t heads, bool norm_first, int64_t activation,
    double eps, const at::Tensor& origin, int64_t out_kind, const at::Tensor& out_w,
    const at::Tensor& out_b) {
  const Shape s{heads, norm_first, activation, eps, packed};
  Linear lin = [&](const at::Tensor& h, int64_t slot) {
    const int64_t k = weight_index(slot);
    return linear(h, weights[k], weights[k + 1], s.packed);
  };
  auto states = layer_loop(x, kv, rows, t, cross_k, cross_v, mask, weights, s, lin, origin);
  if (out_kind == kNoOutput) {
    return states;
  }
  // Transformer.logits: the projection, then final_logits_bias added (empty: none).
  auto logits = linear(states, out_w, at::Tensor(), out_kind == kPackedOutput);
  return given(out_b) ? logits.add_(out_b) : logits;
}

// The int8 step (model/int8.py's _packed_product on fbgemm's packed rows): each input row scaled
// by its absolute maximum (per_row), else fbgemm's scale for the batch; a non-finite input
// stops the step and names its linear (the second output; -1 when none).
struct NonFinite {
  int64_t slot;
};

at::Tensor int8_linear(
    const at::Tensor& x, const c10::IValue& pack, const at::Tensor& bias, int64_t slot,
    bool per_row, double row_scale, int64_t row_zero, bool reduce_range) {
  static const auto& row_op = c10::Dispatcher::singleton().findSchemaOrThrow(
      "quantized::linear_with_input_q_dq_qweight_dq_output_fp32", "");
  static const auto& batch_op =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic", "");
  const bool fused = int8_rows::supported() && x.scalar_type() == at::kFloat;
  auto* rows = fused && per_row ? int8_rows::fbgemm_pack(pack) : nullptr;
  if (rows != nullptr) {  // int8_rows.h: the ops below in three passes, the same numbers
    at::Tensor out;
    if (!int8_rows::linear(x, *rows, bias, static_cast<float>(row_scale),
                           static_cast<int32_t>(row_zero), out)) {
      throw NonFinite{slot};
    }
    return out;
  }
  auto finite = [&](const at::Tensor& m) {
    if (m.numel() && !std::isfinite(m.max().item<double>())) {
      throw NonFinite{slot};
    }
  };
  if (!per_row) {
    if (fused) {  // the scan, not abs, max and a read-back
      auto input = x.expect_contiguous();
      if (!int8_rows::all_finite(input->const_data_ptr<float>(), x.numel())) {
        throw NonFinite{slot};
      }
    } else {
      finite(x.abs());
    }
    torch::jit::Stack stack{x, pack, reduce_range};
    batch_op.callBoxed(&stack);
    return given(bias) ? stack[0].toTensor().add_(bias) : stack[0].toTensor();
  }
  auto scale = x.abs().amax({-1}, true);
  finite(scale);
  scale.clamp_min_(1e-30);
  torch::jit::Stack stack{at::div(x, scale), row_scale, row_zero, pack};
  row_op.callBoxed(&stack);
  auto product = stack[0].toTensor();
  return given(bias) ? at::addcmul(bias, product, scale) : product.mul_(scale);
}

// decoder_layers_int8's boxed kernel: the packed rows are TorchScript objects, passed through.
// A pack past the layers' 6 each is the output layer's (Int8Output: no bias; `out_b`, the
// model's final_logits_bias, added after, empty when none); without one the states return.
void decoder_layers_int8(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  constexpr size_t kArgs = 19;
  auto args = torch::jit::last(*stack, kArgs);
  auto x = args[0].toTensor(), kv = args[1].toTensor(), mask = args[6].toTensor();
  auto cross_k = args[4].toTensorVector(), cross_v = args[5].toTensorVector();
  auto weights = args[7].toTensorVector();
  auto packs = args[8].toList();
  const bool per_row = args[9].toBool(), reduce_range = args[12].toBool();
  const double row_scale = args[10].toDouble();
  const int64_t row_zero = args[11].toInt();
  const Shape s{args[13].toInt(), args[14].toBool(), args[15].toInt(), args[16].toDouble(), false};
  Linear lin = [&](const at::Tensor& h, int64_t slot) {
    const at::Tensor& bias = weights[weight_index(slot) + 1];
    return int8_linear(h, packs.get(slot), bias, slot, per_row, row_scale, row_zero, reduce_range);
  };
  const int64_t output = 6 * static_cast<int64_t>(cross_k.size());
  const at::Tensor out_b = args[18].toTensor();
  at::Tensor out;
  int64_t bad = -1;
  try {
    out = layer_loop(x, kv, args[2].toInt(), args[3].toInt(), cross_k, cross_v, mask, weights, s,
                     lin, args[17].toTensor());
    if (static_cast<int64_t>(packs.size()) > output) {
      out = int8_linear(out, packs.get(output), at::Tensor(), output, per_row, row_scale, row_zero,
                        reduce_range);
      out = given(out_b) ? out.add_(out_b) : out;
    }
  } catch (const NonFinite& e) {
    out = x;
    bad = e.slot;
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, out, bad);
}

// int8.py's _packed_product for a linear outside the step (the encoder's, the cross keys'):
// (x · Wᵀ + bias, whether x was finite).
void int8_product(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  constexpr size_t kArgs = 7;
  auto args = torch::jit::last(*stack, kArgs);
  auto x = args[0].toTensor();
  at::Tensor out;
  bool finite = true;
  try {
    out = int8_linear(x, args[1], args[2].toTensor(), 0, args[3].toBool(), args[4].toDouble(),
                      args[5].toInt(), args[6].toBool());
  } catch (const NonFinite&) {
    out = x;
    finite = false;
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, out, finite);
}

}  // namespace

TORCH_LIBRARY(seq2seq_step, m) {
  // The step's attention alone (tests compare it with SDPA): q [N, B, H·d], k and v [N, H, T, d],
  // mask [N, T] bool or empty (every key allowed).
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor mask, int heads) -> Tensor",
        &step_attention::attend);
  // What search reads of a step's logits (step_select.h): (norm, best, column).
  m.def("select(Tensor(a!) logits, Tensor never, int width) -> (Tensor, Tensor, Tensor)",
        &step_select::select);
  m.def(
      "decoder_layers(Tensor x, Tensor kv, int rows, int t, Tensor[] cross_k, Tensor[] cross_v, "
      "Tensor mask, Tensor[] weights, bool packed, int heads, bool norm_first, int activation, "
      "float eps, Tensor origin, int out_kind, Tensor out_w, Tensor out_b) -> Tensor",
      &decoder_layers);
  m.def(
      "int8_product(Tensor x, __torch__.torch.classes.quantized.LinearPackedParamsBase pack, "
      "Tensor bias, bool per_row, float row_scale, int row_zero, bool reduce_range) "
      "-> (Tensor, bool)",
      torch::CppFunction::makeFromBoxedFunction<&int8_product>());
  m.def(
      "decoder_layers_int8(Tensor x, Tensor kv, int rows, int t, Tensor[] cross_k, "
      "Tensor[] cross_v, Tensor mask, Tensor[] weights, "
      "__torch__.torch.classes.quantized.LinearPackedParamsBase[] packs, bool per_row, "
      "float row_scale, int row_zero, bool reduce_range, int heads, bool norm_first, "
      "int activation, float eps, Tensor origin, Tensor out_b) -> (Tensor, int)",
      torch::CppFunction::makeFromBoxedFunction<&decoder_layers_int8>());
}
