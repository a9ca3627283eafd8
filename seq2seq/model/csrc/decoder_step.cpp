// The decoder's layer loop for one new position, as one C++ function over the same ATen calls
// the Python step makes (seq2seq/model/transformer.py: DecoderLayer.step, MultiHeadAttention.step
// and step_cross, FeedForward, Residual, then decoder_norm), in the same order and on the same
// shapes, so float32 results are bit-identical; what goes is the Python between the operators.
// Built by `make install` (seq2seq/model/compiled_step.py); without it the Python step runs.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

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

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Shape& s) {
  if (!s.packed) {
    return at::linear(x, w, b);
  }
  // PackedLinear.forward's call, through the dispatcher as torch.ops makes it.
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                       .typed<LinearPointwise>();
  return op.call(x, w, b, "none", c10::List<std::optional<at::Scalar>>(), c10::string_view(""));
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

// MultiHeadAttention._attend's tail: heads back together, then the output projection.
at::Tensor merge(const at::Tensor& y, const at::Tensor* w, const Shape& s, int64_t d) {
  return linear(y.transpose(1, 2).reshape({y.size(0), y.size(2), d}), w[0], w[1], s);
}

// MultiHeadAttention.step: position t's key and value written into kv [N, 2, H, cap, d_head].
at::Tensor self_attention(
    const at::Tensor& x, const at::Tensor& kv, int64_t t, const at::Tensor* w, const Shape& s) {
  const int64_t d = x.size(-1);
  auto heads = linear(x, w[0], w[1], s).view({x.size(0), 3, s.heads, d / s.heads});
  kv.select(3, t).copy_(heads.slice(1, 1));
  auto q = heads.select(1, 0).unsqueeze(2);
  auto k = kv.select(1, 0).slice(2, 0, t + 1);
  auto v = kv.select(1, 1).slice(2, 0, t + 1);
  auto y = at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false);
  return merge(y, w + 2, s, d);
}

// MultiHeadAttention.step_cross: a sentence's beams attend as `beam` queries over its keys.
at::Tensor cross_attention(
    const at::Tensor& x, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
    const at::Tensor* w, const Shape& s) {
  const int64_t d = x.size(-1), n = k.size(0);
  auto q = linear(x, w[0], w[1], s).view({n, -1, d});
  q = q.view({n, q.size(1), s.heads, d / s.heads}).transpose(1, 2);
  auto y = at::scaled_dot_product_attention(q, k, v, mask.unsqueeze(1), 0.0, false);
  return merge(y, w + 2, s, d).view(x.sizes());
}

// Residual: pre-norm x + f(norm(x)), post-norm norm(x + f(x)).
template <typename F>
at::Tensor residual(const at::Tensor& x, const at::Tensor* n, const Shape& s, F f) {
  if (s.norm_first) {
    return x + f(norm(x, n[0], n[1], s));
  }
  return norm(x + f(x), n[0], n[1], s);
}

at::Tensor decoder_layers(
    const at::Tensor& x_in, const at::Tensor& kv, int64_t rows, int64_t t,
    at::TensorList cross_k, at::TensorList cross_v, const at::Tensor& mask,
    at::TensorList weights, bool packed, int64_t heads, bool norm_first, int64_t activation,
    double eps) {
  const Shape s{heads, norm_first, activation, eps, packed};
  const int64_t layers = static_cast<int64_t>(cross_k.size());
  TORCH_CHECK(
      static_cast<int64_t>(weights.size()) == kPerLayer * layers ||
          static_cast<int64_t>(weights.size()) == kPerLayer * layers + 2,
      "decoder_layers: ", weights.size(), " weights for ", layers, " layers");
  auto live = kv.slice(0, 0, rows);
  at::Tensor x = x_in;
  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor* w = weights.data() + kPerLayer * i;
    auto cache = live.select(1, i);
    x = residual(x, w, s, [&](const at::Tensor& h) { return self_attention(h, cache, t, w + 2, s); });
    x = residual(x, w + 6, s, [&](const at::Tensor& h) {
      return cross_attention(h, cross_k[i], cross_v[i], mask, w + 8, s);
    });
    x = residual(x, w + 12, s, [&](const at::Tensor& h) {
      return linear(activate(linear(h, w[14], w[15], s), s), w[16], w[17], s);
    });
  }
  if (static_cast<int64_t>(weights.size()) == kPerLayer * layers + 2) {
    x = norm(x, weights[kPerLayer * layers], weights[kPerLayer * layers + 1], s);
  }
  return x;
}

}  // namespace

TORCH_LIBRARY(seq2seq_step, m) {
  m.def(
      "decoder_layers(Tensor x, Tensor kv, int rows, int t, Tensor[] cross_k, Tensor[] cross_v, "
      "Tensor mask, Tensor[] weights, bool packed, int heads, bool norm_first, int activation, "
      "float eps) -> Tensor",
      &decoder_layers);
}
