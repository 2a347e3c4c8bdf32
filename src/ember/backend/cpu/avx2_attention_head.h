// Internal to the CPU backend's AVX2 attention (avx2_attention.cpp): the head-by-head kernels, for
// GQA groups and head_dims the grouped kernels (avx2_attention_group.h) do not take, on f32 rows
// (a narrow cache is widened into the scratch first). Include only from files compiled for AVX2
// (functions carry EMBER_AVX2_INLINE).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ember/backend/cpu/avx2_attention_group.h"
#include "ember/backend/cpu/avx2_util.h"

namespace ember::cpu::avx2 {

// q · k over hd values; hd % 8 lanes are handled with the tail mask.
EMBER_AVX2_INLINE float dot(const float* q, const float* k, int64_t hd, __m256i mask) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), a1);
  }
  if (d + 8 <= hd) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a0);
    d += 8;
  }
  if (d < hd) {
    a1 = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, mask), _mm256_maskload_ps(k + d, mask), a1);
  }
  return hsum(_mm256_add_ps(a0, a1));
}

// Per-lane partial sums of q . k_i for N keys (rows k + i * stride): one accumulator per key.
template <int N>
EMBER_AVX2_INLINE void key_partials(const float* q, const float* k, int64_t stride, int64_t hd,
                                    __m256i mask, __m256 (&a)[N]) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) a[i] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i)
      a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i * stride + d), a[i]);
  }
  if (d < hd) {
    const __m256 qv = _mm256_maskload_ps(q + d, mask);
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      a[i] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + i * stride + d, mask), a[i]);
    }
  }
}

// q . k_i for 4 keys at once, reduced together instead of by four separate horizontal sums.
EMBER_AVX2_INLINE __m128 dot4(const float* q, const float* k, int64_t stride, int64_t hd,
                              __m256i mask) {
  __m256 a[4];
  key_partials<4>(q, k, stride, hd, mask, a);
  const __m256 h = hadd_tree4(a);
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// q . k_i for 8 keys at once: 8 independent FMA chains (dot4's 4 chains wait on the FMA latency),
// each key's sum bit-identical to dot4's (same partials, same tree; the halves of keys 0-3 and
// 4-7 are then completed side by side).
EMBER_AVX2_INLINE __m256 dot8(const float* q, const float* k, int64_t stride, int64_t hd,
                              __m256i mask) {
  __m256 a[8];
  key_partials<8>(q, k, stride, hd, mask, a);
  const __m256 h0123 = hadd_tree4(a), h4567 = hadd_tree4(a + 4);
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// acc[0, NV * 8) += sum_i p[i] * v_i[0, NV * 8) over n rows v_i = v + i * stride, with the
// accumulator held in registers for the whole block (one load and one store per block instead of
// one per key). `mask` covers the valid lanes of the last vector (hd not a multiple of 8), so no
// V row is read past its end.
template <int NV>
EMBER_AVX2_INLINE void accumulate_pv(float* acc, const float* p, const float* v, int64_t stride,
                                     int64_t n, __m256i mask, bool masked_tail) {
  __m256 a[NV];
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int64_t i = 0; i < n; ++i) {
    const __m256 pv = _mm256_set1_ps(p[i]);
    const float* vi = v + i * stride;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      const __m256 vv = (c == NV - 1 && masked_tail) ? _mm256_maskload_ps(vi + 8 * c, mask)
                                                     : _mm256_loadu_ps(vi + 8 * c);
      a[c] = _mm256_fmadd_ps(pv, vv, a[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

// accumulate_pv<nv> for a run-time nv in 1..NV (compile-time dispatch, stays inlined).
template <int NV>
EMBER_AVX2_INLINE void accumulate_pv_width(int64_t nv, float* acc, const float* p, const float* v,
                                           int64_t stride, int64_t n, __m256i mask, bool tail) {
  if constexpr (NV > 1) {
    if (nv < NV) return accumulate_pv_width<NV - 1>(nv, acc, p, v, stride, n, mask, tail);
  }
  accumulate_pv<NV>(acc, p, v, stride, n, mask, tail);
}

// accumulate_pv over any head_dim: chunks of up to 8 vectors.
EMBER_AVX2_INLINE void accumulate_pv_any(float* acc, const float* p, const float* v, int64_t stride,
                                         int64_t n, int64_t hd, __m256i mask) {
  for (int64_t d = 0; d < hd; d += 64) {
    const int64_t nv = std::min<int64_t>(8, (hd - d + 7) / 8);
    accumulate_pv_width<8>(nv, acc + d, p, v + d, stride, n, mask, d + nv * 8 > hd);
  }
}

// Scores s[0, n) = scale * q . k_i over a step's keys (block b holds keys [b bs, b bs + bs)), then
// -inf up to n_pad so that exp() makes the padding 0. Keys go 8, then 4, then 1 at a time within
// each block, as dot8 / dot4 / dot give the same bits per key.
EMBER_AVX2_INLINE void step_scores(const float* q, const float* const* blocks, int64_t bs,
                                   int64_t n, int64_t row_stride, int64_t hd, __m256i hd_mask,
                                   float scale, int64_t n_pad, float* s) {
  for (int64_t b = 0; b * bs < n; ++b) {
    const float* kb = blocks[b];
    float* sb = s + b * bs;
    const int64_t nb = std::min(bs, n - b * bs);
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
      const __m256 d8 = dot8(q, kb + i * row_stride, row_stride, hd, hd_mask);
      _mm256_storeu_ps(sb + i, _mm256_mul_ps(d8, _mm256_set1_ps(scale)));
    }
    for (; i + 4 <= nb; i += 4) {
      const __m128 d4 = dot4(q, kb + i * row_stride, row_stride, hd, hd_mask);
      _mm_storeu_ps(sb + i, _mm_mul_ps(d4, _mm_set1_ps(scale)));
    }
    for (; i < nb; ++i) sb[i] = dot(q, kb + i * row_stride, hd, hd_mask) * scale;
  }
  for (int64_t i = n; i < n_pad; ++i) s[i] = -INFINITY;
}

}  // namespace ember::cpu::avx2
