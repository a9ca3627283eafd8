// The int8 step's linear on fbgemm directly (decoder_step.cpp's int8_linear): what
// model/int8.py's _packed_product computes with five ATen ops (abs, amax, clamp, div, the
// quantized linear, addcmul) and a read-back, here in three passes with no float copy of x:
//   1. per row, the absolute maximum, non-finite values found on the way (no read-back);
//   2. per row, x / scale quantized to uint8 as fbgemm's QuantizeAvx2 does (fma with the
//      inverse scale and the zero point, round to nearest even, clamp), written once;
//   3. fbgemm's int8 GEMM on those rows with torch's float epilogue (ReQuantizeForFloat, the
//      template torch's quantized linear uses), then each row times its scale plus the bias.
// Every step is the arithmetic of the ATen path, element for element, so results are
// bit-identical (tests/test_compiled_step.py holds them to it).

#pragma once

#ifndef USE_FBGEMM
#define USE_FBGEMM  // fbgemm_utils.h declares PackedLinearWeight only under it (torch has it)
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/quantized/cpu/fbgemm_utils.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace int8_rows {

constexpr float kTiny = 1e-30f;  // int8.py's TINY: an all-zero row's scale
constexpr int64_t kGrain = 32768;  // values a thread takes at least in a pass over rows
// fbgemm's clip before float -> int32 (the largest int32 below INT32_MAX a float holds).
constexpr float kIntMax = 2147483520.0f;

// Whether this CPU runs the fused path (fbgemm itself, and AVX2 with FMA for the loops here).
inline bool supported() {
  static const bool ok = fbgemm::fbgemmSupportedCPU() && __builtin_cpu_supports("avx2") &&
                         __builtin_cpu_supports("fma");
  return ok;
}

// Each row's absolute maximum (clamped to kTiny) into scale; false when any value of x is
// infinite or NaN (the comparison is unordered for NaN), found while scanning.
__attribute__((target("avx2"))) inline bool row_scales(
    const float* x, int64_t rows, int64_t k, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 bad = _mm256_setzero_ps();
  bool bad_tail = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * k;
    __m256 m = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
      __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(row + j));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));
      m = _mm256_max_ps(m, a);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float best = 0.0f;
    for (float v : lanes) {
      best = std::max(best, v);
    }
    for (; j < k; ++j) {
      const float a = std::fabs(row[j]);
      bad_tail |= !(a <= std::numeric_limits<float>::max());
      best = std::max(best, a);
    }
    scale[r] = std::max(best, kTiny);
  }
  return !bad_tail && _mm256_movemask_ps(bad) == 0;
}

// Whether every value of x is finite (the batch-scale path's check).
inline bool all_finite(const float* x, int64_t n) {
  float ignored = 0.0f;
  return row_scales(x, 1, n, &ignored);
}

// fbgemm's QuantizeAvx2<uint8_t, LEGACY=true> on one value: fma(v, 1/scale, zero), clipped,
// rounded to nearest even (the default rounding mode, as cvtps2dq), clamped to [0, 255].
inline uint8_t quantize_one(float v, float inverse, float zero) {
  const float t = std::min(std::fma(v, inverse, zero), kIntMax);
  const auto q = static_cast<int64_t>(std::nearbyint(t));
  return static_cast<uint8_t>(std::clamp<int64_t>(q, 0, 255));
}

// Row r of x divided by scale[r] (IEEE division, as at::div) and quantized with fbgemm's
// fixed (q_scale, q_zero), into q [rows, k].
__attribute__((target("avx2,fma"))) inline void quantize_rows(
    const float* x, int64_t rows, int64_t k, const float* scale, float q_scale, int32_t q_zero,
    uint8_t* q) {
  const float inverse = 1.0f / q_scale;  // as fbgemm: a multiply by the inverse, not a divide
  const float zero = static_cast<float>(q_zero);
  const __m256 inv_v = _mm256_set1_ps(inverse), zero_v = _mm256_set1_ps(zero);
  const __m256 clip_v = _mm256_set1_ps(kIntMax);
  const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(255);
  const __m256i bytes = _mm256_set_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 12, 8, 4,
                                        0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 12, 8,
                                        4, 0);
  const __m256i gather = _mm256_set_epi32(0, 0, 0, 0, 0, 0, 4, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * k;
    uint8_t* out = q + r * k;
    const __m256 s = _mm256_set1_ps(scale[r]);
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
      __m256 t = _mm256_div_ps(_mm256_loadu_ps(row + j), s);
      t = _mm256_min_ps(_mm256_fmadd_ps(t, inv_v, zero_v), clip_v);
      __m256i v = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(t), lo), hi);
      v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, bytes), gather);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + j), _mm256_castsi256_si128(v));
    }
    for (; j < k; ++j) {
      out[j] = quantize_one(row[j] / scale[r], inverse, zero);
    }
  }
}

// out [rows, n] = the int8 product of q's rows with the packed weight, in float: fbgemm's GEMM
// and torch's epilogue for per-channel weights, threads split as torch's quantized linear does.
inline void gemm(
    const uint8_t* q, int64_t rows, int64_t k, PackedLinearWeight& w, float q_scale,
    int32_t q_zero, float* out) {
  const int64_t n = w.w->numCols();
  std::unique_ptr<int32_t[]> acc(new int32_t[rows * n]);
  // Symmetric weights (int8.py's, zero points all 0) subtract nothing per row: without the row
  // offsets fbgemm's epilogue takes its B-symmetric path, the same integers with no multiply.
  const bool symmetric =
      std::all_of(w.w_zp.begin(), w.w_zp.end(), [](int32_t z) { return z == 0; });
  const int tasks = at::get_num_threads();
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    fbgemm::PackAWithRowOffset<uint8_t> pack_a(
        fbgemm::matrix_op_t::NoTranspose, rows, k, q, k, nullptr, 1);
    fbgemm::DoNothing<float, float> nothing{};
    for (int64_t task = begin; task < end; ++task) {
      fbgemm::ReQuantizeForFloat<false, fbgemm::QuantizationGranularity::OUT_CHANNEL> epilogue(
          nothing, q_scale, w.w_scale.data(), q_zero, w.w_zp.data(),
          symmetric ? nullptr : pack_a.getRowOffsetBuffer(), w.col_offsets.data(), nullptr, n);
      fbgemm::fbgemmPacked(pack_a, *w.w, out, acc.get(), n, epilogue, task, tasks);
    }
  });
}

// out[r, j] = fma(out[r, j], scale[r], bias[j]): at::addcmul(bias, out, scale) as torch's CPU
// kernel computes it (compiled with FMA, its product and sum contract into one rounding).
__attribute__((target("avx2,fma"))) inline void scale_and_bias(
    float* out, int64_t rows, int64_t n, const float* scale, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out + r * n;
    const __m256 s = _mm256_set1_ps(scale[r]);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 p = _mm256_loadu_ps(row + j);
      _mm256_storeu_ps(row + j, _mm256_fmadd_ps(p, s, _mm256_loadu_ps(bias + j)));
    }
    for (; j < n; ++j) {
      row[j] = std::fma(row[j], scale[r], bias[j]);
    }
  }
}

// The fused path's PackedLinearWeight, or nullptr when the pack is another kind (another
// engine's, or per-tensor weights): the caller then takes the ATen ops.
inline PackedLinearWeight* fbgemm_pack(const c10::IValue& pack) {
  auto* w = dynamic_cast<PackedLinearWeight*>(
      pack.toCustomClass<LinearPackedParamsBase>().get());
  return w != nullptr && w->q_scheme == c10::kPerChannelAffine ? w : nullptr;
}

// x · Wᵀ + bias (an undefined or empty bias: none) with one activation scale per row of x,
// fused; false when x holds a non-finite value (nothing is computed then).
inline bool linear(
    const at::Tensor& x, PackedLinearWeight& w, const at::Tensor& bias, float q_scale,
    int32_t q_zero, at::Tensor& result) {
  auto input = x.expect_contiguous();
  const int64_t k = x.size(-1), rows = k ? x.numel() / k : 0;
  const int64_t n = w.w->numCols();
  const float* in = input->const_data_ptr<float>();
  // The passes over rows split across threads as torch's elementwise ops would (each row's
  // arithmetic is its own: the results do not depend on the split).
  const int64_t grain_in = std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1));
  const int64_t grain_out = std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1));
  std::vector<float> scale(rows);
  std::atomic<bool> finite{true};
  std::unique_ptr<uint8_t[]> q(new uint8_t[rows * k]);
  at::parallel_for(0, rows, grain_in, [&](int64_t begin, int64_t end) {
    if (!row_scales(in + begin * k, end - begin, k, scale.data() + begin)) {
      finite = false;
      return;
    }
    quantize_rows(in + begin * k, end - begin, k, scale.data() + begin, q_scale, q_zero,
                  q.get() + begin * k);
  });
  if (!finite) {
    return false;
  }
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  result = at::empty(sizes, x.options());
  float* out = result.data_ptr<float>();
  if (rows == 0) {
    return true;
  }
  gemm(q.get(), rows, k, w, q_scale, q_zero, out);
  const bool no_bias = !bias.defined() || bias.numel() == 0;  // int8.py's product.mul_(scale)
  auto b = no_bias ? c10::MaybeOwned<at::Tensor>::borrowed(bias) : bias.expect_contiguous();
  at::parallel_for(0, rows, grain_out, [&](int64_t begin, int64_t end) {
    if (no_bias) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = out + r * n;
        for (int64_t j = 0; j < n; ++j) row[j] *= scale[r];
      }
    } else {
      scale_and_bias(out + begin * n, end - begin, n, scale.data() + begin,
                     b->const_data_ptr<float>());
    }
  });
  return true;
}

}  // namespace int8_rows
