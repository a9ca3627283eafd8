// What search reads of a step's logits, in one call instead of six operators over [N, V]: per
// row, the log-normaliser logsumexp over every column (decode/step.py: log p = logit − norm),
// then the columns search never outputs set to -inf, then the row's `width` best columns,
// best first (beam search's per-row top 2k; greedy's argmax at width 1). Two passes over a
// row that stays in cache, nothing written but the -inf columns; the normaliser is torch's to
// float32 rounding (its own exp and summation order), not bit for bit.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "step_attention.h"  // exp_nonpositive, STEP_CLONES

// step_attention.h's options exactly: GCC inlines exp_nonpositive only into functions compiled
// with the same ones (with others it was a call per element, 10x slower).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast", "no-loop-unroll-and-jam")

namespace step_select {

constexpr int kLanes = 16;
using step_attention::exp_nonpositive;

// The row's maximum (a NaN is passed over: row_norm finds it in the sum). 64 running maxima,
// not 16: one chain of dependent max operations was the loop's limit.
STEP_CLONES
static float row_max(const float* x, int64_t V) {
  constexpr int kWide = 64;
  float m[kWide];
  for (int j = 0; j < kWide; ++j) m[j] = -INFINITY;
  int64_t i = 0;
  for (; i + kWide <= V; i += kWide) {
    for (int j = 0; j < kWide; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  }
  float top = -INFINITY;
  for (int j = 0; j < kWide; ++j) top = m[j] > top ? m[j] : top;
  for (; i < V; ++i) top = x[i] > top ? x[i] : top;
  return top;
}

// Σ exp(x − top) over the row, top its finite maximum.
STEP_CLONES
static float row_sum_exp(const float* x, int64_t V, float top) {
  float s[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) s[j] += exp_nonpositive(x[i + j] - top);
  }
  float total = 0.0f;
  for (int j = 0; j < kLanes; ++j) total += s[j];
  for (; i < V; ++i) total += exp_nonpositive(x[i] - top);
  return total;
}

// logsumexp of a row; where the fast loop cannot serve (a NaN, which makes its sum NaN, an
// infinite or an all -inf row) as torch computes it: an infinite maximum is not subtracted, and
// a NaN carries through.
static float row_norm(const float* x, int64_t V) {
  const float top = row_max(x, V);
  if (std::isfinite(top)) {
    const float total = row_sum_exp(x, V, top);
    if (!std::isnan(total)) return top + std::log(total);
  }
  const float shift = std::isinf(top) ? 0.0f : top;
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i) total += std::exp(static_cast<double>(x[i] - shift));
  return static_cast<float>(std::log(total)) + shift;
}

// The row's `width` largest values and their columns, best first; of equal values the lower
// column first. NaNs are never taken; columns are still distinct and valid when fewer than
// `width` values are above -inf (the lowest unused ones, at -inf).
STEP_CLONES
static void row_top(const float* x, int64_t V, int64_t width, float* best, int64_t* column) {
  for (int64_t j = 0; j < width; ++j) best[j] = -INFINITY, column[j] = -1;
  float floor = -INFINITY;  // the width-th value so far: only a larger one enters
  auto enter = [&](float v, int64_t c) {
    int64_t j = width - 1;
    while (j > 0 && best[j - 1] < v) {
      best[j] = best[j - 1], column[j] = column[j - 1];
      --j;
    }
    best[j] = v, column[j] = c;
    floor = best[width - 1];
  };
  // A block of 64 is looked at only when its maximum passes the floor (rarely, once filled).
  constexpr int kBlock = 64;
  int64_t i = 0;
  for (; i + kBlock <= V; i += kBlock) {
    float m[kLanes];
    for (int j = 0; j < kLanes; ++j) m[j] = x[i + j];
    for (int b = kLanes; b < kBlock; b += kLanes) {
      for (int j = 0; j < kLanes; ++j) m[j] = x[i + b + j] > m[j] ? x[i + b + j] : m[j];
    }
    float top = m[0];
    for (int j = 1; j < kLanes; ++j) top = m[j] > top ? m[j] : top;
    if (top > floor) {
      for (int j = 0; j < kBlock; ++j) {
        if (x[i + j] > floor) enter(x[i + j], i + j);
      }
    }
  }
  for (; i < V; ++i) {
    if (x[i] > floor) enter(x[i], i);
  }
  if (column[width - 1] >= 0) return;
  int64_t filled = 0;
  while (filled < width && column[filled] >= 0) ++filled;
  for (int64_t c = 0; c < V && filled < width; ++c) {
    bool used = false;
    for (int64_t j = 0; j < filled; ++j) used |= column[j] == c;
    if (!used) best[filled] = x[c] == x[c] ? x[c] : -INFINITY, column[filled++] = c;
  }
}

// logits [N, V] float32 (its `never` columns set to -inf in place) → (norm [N], best [N, w],
// column [N, w] int64), w = min(width, V); width 0: the normaliser only.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> select(const at::Tensor& logits,
                                                            const at::Tensor& never,
                                                            int64_t width) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
              "select: contiguous float32 logits [N, V]");
  TORCH_CHECK(never.scalar_type() == at::kLong && never.dim() == 1, "select: never int64 [m]");
  const int64_t N = logits.size(0), V = logits.size(1), m = never.numel();
  const int64_t w = std::max<int64_t>(0, std::min(width, V));
  auto norm = at::empty({N}, logits.options());
  auto best = at::empty({N, w}, logits.options());
  auto column = at::empty({N, w}, logits.options().dtype(at::kLong));
  auto held = never.contiguous();
  const int64_t* nv = held.data_ptr<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    TORCH_CHECK(nv[j] >= 0 && nv[j] < V, "select: never column ", nv[j], " outside ", V);
  }
  float* x = logits.data_ptr<float>();
  float* np = norm.data_ptr<float>();
  float* bp = best.data_ptr<float>();
  int64_t* cp = column.data_ptr<int64_t>();
  at::parallel_for(0, N, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * V;
      np[r] = row_norm(row, V);
      for (int64_t j = 0; j < m; ++j) row[nv[j]] = -INFINITY;
      if (w) row_top(row, V, w, bp + r * w, cp + r * w);
    }
  });
  return {norm, best, column};
}

}  // namespace step_select

#pragma GCC pop_options
