// §3.2.1 for one query at a time: softmax(q·Kᵀ/√d_head) V over T keys, in one pass over the
// keys for the scores and one for the values; what SDPA does for a decoding step's tiny shapes
// with none of its tiling (at 1 thread its set-up cost more than the arithmetic).
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// The loops' multiply-adds as FMAs here only (int8_rows.h, in the same unit, rounds as fbgemm does).
// No unroll-and-jam: it fused two key steps of the value loop into one scalar loop over d_head.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast", "no-loop-unroll-and-jam")

namespace step_attention {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STEP_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STEP_CLONES
#endif

// exp(x) for x ≤ 0 (scores minus their maximum), Cephes' expf polynomial, branch-free so the
// loop vectorizes; relative error ~2e-7 (std::exp's call per element cost more than the rest).
static inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

// Where key (or value) t of a query lives: `base` + t·`step`, plus, when the positions are read
// through a table (a beam's reorders moved indices, not keys), its row's offset there.
struct Keys {
  const float* base;
  int64_t step;
  const int64_t* rows;  // row of each position, or null: all in `base`'s row
  int64_t row_step;
  const float* at(int64_t t) const { return base + (rows ? rows[t] * row_step : 0) + t * step; }
};

// One query: out[d] = Σ_t softmax_t(scale · q·k_t) v_t over the keys where allowed (mask null:
// all); `w` is scratch for T weights. A query with no allowed key gets zeros. D: d_head when
// known at compile time (its accumulators then stay in registers), 0 for any (`d`).
template <int D>
STEP_CLONES
static void attend_row(const float* q, Keys k, Keys v, const bool* mask, int64_t mask_step,
                       int64_t T, int64_t d, float scale, float* w, float* out) {
  constexpr int kLanes = 16;
  const int64_t dd = D ? D : d;
  // Four keys at a time: four independent sums, not one chain of dependent adds.
  int64_t t = 0;
  for (; t + 4 <= T; t += 4) {
    float a0[kLanes] = {0}, a1[kLanes] = {0}, a2[kLanes] = {0}, a3[kLanes] = {0};
    const float *k0 = k.at(t), *k1 = k.at(t + 1), *k2 = k.at(t + 2), *k3 = k.at(t + 3);
    int64_t i = 0;
    for (; i + kLanes <= dd; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const float x = q[i + j];
        a0[j] += x * k0[i + j];
        a1[j] += x * k1[i + j];
        a2[j] += x * k2[i + j];
        a3[j] += x * k3[i + j];
      }
    }
    for (; i < dd; ++i) {
      a0[0] += q[i] * k0[i];
      a1[0] += q[i] * k1[i];
      a2[0] += q[i] * k2[i];
      a3[0] += q[i] * k3[i];
    }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int j = 0; j < kLanes; ++j) {
      s0 += a0[j];
      s1 += a1[j];
      s2 += a2[j];
      s3 += a3[j];
    }
    w[t] = s0 * scale;
    w[t + 1] = s1 * scale;
    w[t + 2] = s2 * scale;
    w[t + 3] = s3 * scale;
  }
  for (; t < T; ++t) {
    const float* kt = k.at(t);
    float a[kLanes] = {0};
    int64_t i = 0;
    for (; i + kLanes <= dd; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) a[j] += q[i + j] * kt[i + j];
    }
    for (; i < dd; ++i) a[0] += q[i] * kt[i];
    float s = 0;
    for (int j = 0; j < kLanes; ++j) s += a[j];
    w[t] = s * scale;
  }
  float top = -INFINITY;
  for (int64_t u = 0; u < T; ++u) {
    if (mask != nullptr && !mask[u * mask_step]) w[u] = -INFINITY;
    top = w[u] > top ? w[u] : top;
  }
  if (top == -INFINITY) {
    for (int64_t i = 0; i < dd; ++i) out[i] = 0.0f;
    return;
  }
  // kLanes partial sums: one running sum kept the exps scalar (a float sum is not reordered).
  float sums[kLanes] = {0};
  int64_t u = 0;
  for (; u + kLanes <= T; u += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float e = w[u + j] == -INFINITY ? 0.0f : exp_nonpositive(w[u + j] - top);
      w[u + j] = e;
      sums[j] += e;
    }
  }
  float total = 0.0f;
  for (int j = 0; j < kLanes; ++j) total += sums[j];
  for (; u < T; ++u) {
    const float e = w[u] == -INFINITY ? 0.0f : exp_nonpositive(w[u] - top);
    w[u] = e;
    total += e;
  }
  const float inv = 1.0f / total;
  if constexpr (D > 0) {
    // Four values at a time, each element's sum still in key order: one at a time, the
    // compiler unrolled the key loop into a scalar one.
    float o[D] = {0};
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) {
      const float e0 = w[t], e1 = w[t + 1], e2 = w[t + 2], e3 = w[t + 3];
      const float *v0 = v.at(t), *v1 = v.at(t + 1), *v2 = v.at(t + 2), *v3 = v.at(t + 3);
      for (int i = 0; i < D; ++i) {
        float acc = o[i];
        acc += e0 * v0[i];
        acc += e1 * v1[i];
        acc += e2 * v2[i];
        acc += e3 * v3[i];
        o[i] = acc;
      }
    }
    for (; t < T; ++t) {
      const float e = w[t];
      const float* vt = v.at(t);
      for (int i = 0; i < D; ++i) o[i] += e * vt[i];
    }
    for (int i = 0; i < D; ++i) out[i] = o[i] * inv;
  } else {
    for (int64_t i = 0; i < dd; ++i) out[i] = 0.0f;
    for (int64_t u = 0; u < T; ++u) {
      const float e = w[u];
      const float* vt = v.at(u);
      for (int64_t i = 0; i < dd; ++i) out[i] += e * vt[i];
    }
    for (int64_t i = 0; i < dd; ++i) out[i] *= inv;
  }
}

// q [N, B, H·d] (B queries per key set), k and v [R, H, T, d] with d contiguous, mask [N, T]
// (bool, any strides; empty: all allowed), `origin` [N, ≥T] int64 (empty: query set n reads
// row n, R = N): the row of k and v that holds position t for query set n → [N, B, H·d], heads
// already merged.
inline at::Tensor attend_through(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, int64_t heads, const at::Tensor& origin) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat && k.stride(3) == 1 && v.stride(3) == 1 &&
                  q.stride(2) == 1,
              "step attention: float32 with contiguous heads");
  const bool through = origin.defined() && origin.numel();
  TORCH_CHECK(!through || (origin.scalar_type() == at::kLong && origin.stride(1) == 1),
              "step attention: origin int64 with contiguous positions");
  const int64_t N = q.size(0), B = q.size(1), d = k.size(3), T = k.size(2);
  TORCH_CHECK(through || k.size(0) == N, "step attention: one key row per query set");
  auto out = at::empty({N, B, heads * d}, q.options());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const bool* mp = mask.defined() && mask.numel() ? mask.data_ptr<bool>() : nullptr;
  const int64_t* rp = through ? origin.data_ptr<int64_t>() : nullptr;
  float* op = out.data_ptr<float>();
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1), rs0 = through ? origin.stride(0) : 0;
  const int64_t ks0 = k.stride(0), ks1 = k.stride(1), ks2 = k.stride(2);
  const int64_t vs0 = v.stride(0), vs1 = v.stride(1), vs2 = v.stride(2);
  const int64_t ms0 = mp ? mask.stride(0) : 0, ms1 = mp ? mask.stride(1) : 0;
  auto row = d == 64 ? attend_row<64> : d == 32 ? attend_row<32> : d == 128 ? attend_row<128>
                                                                          : attend_row<0>;
  at::parallel_for(0, N * heads, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(T));
    for (int64_t nh = begin; nh < end; ++nh) {
      const int64_t n = nh / heads, h = nh % heads;
      const int64_t own = rp ? 0 : n;  // the row itself, or each position's row from `origin`
      const Keys keys{kp + own * ks0 + h * ks1, ks2, rp ? rp + n * rs0 : nullptr, ks0};
      const Keys values{vp + own * vs0 + h * vs1, vs2, rp ? rp + n * rs0 : nullptr, vs0};
      for (int64_t b = 0; b < B; ++b) {
        row(qp + n * qs0 + b * qs1 + h * d, keys, values, mp ? mp + n * ms0 : nullptr, ms1, T, d,
            scale, w.data(), op + (n * B + b) * heads * d + h * d);
      }
    }
  });
  return out;
}

// attend_through with every query set reading its own row.
inline at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, int64_t heads) {
  return attend_through(q, k, v, mask, heads, at::Tensor());
}

}  // namespace step_attention

#pragma GCC pop_options
