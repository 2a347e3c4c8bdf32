// Internal to the CPU backend's AVX2 attention (avx2_attention.cpp): the grouped kernels, which
// run the G query heads of one kv head together over rows of any cache format (load_kv8). Include
// only from files compiled for AVX2 (functions carry EMBER_AVX2_INLINE).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/backend/cpu/avx2_kv_rows.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kv_pv_q8.h"

namespace ember::cpu::avx2 {

// hadd(a0, a1) = [a0 pairs, a1 pairs] per 128-bit half; two levels give, per half, the partial
// sums of 4 keys in order; adding the halves completes them.
EMBER_AVX2_INLINE __m256 hadd_tree4(const __m256* a) {
  return _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
}

// --- Grouped path: the G query heads of a kv head together (hd % 8 == 0, G <= 3) ---------------
// Each K/V chunk is loaded once for all G heads (and, from an f16 cache read by one token, widened
// in registers: no scratch pass). Per (head, key) the FMAs and reductions are those of dot4 /
// accumulate_pv (avx2_attention.cpp), so the bits are the same as the per-head path's.

// dot() for hd % 8 == 0 and either row type: the same accumulators and order.
template <typename Elem>
EMBER_AVX2_INLINE float dot_row(const float* q, const Elem* k, int64_t hd) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_kv8(k, d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load_kv8(k, d + 8), a1);
  }
  if (d < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_kv8(k, d), a0);
  return hsum(_mm256_add_ps(a0, a1));
}

// group_dot4's accumulation for rows widened 8 values at a time: each key chunk loaded once for
// the G heads, the G query chunks once for the 4 keys.
template <int G, typename Elem>
EMBER_AVX2_INLINE void group_dot4_chunks(const float* q, int64_t hd, const Elem* k, int64_t stride,
                                         __m256 (&a)[G][4]) {
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 qv[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) qv[h] = _mm256_loadu_ps(q + h * hd + d);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256 kv = load_kv8(k + i * stride, d);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) a[h][i] = _mm256_fmadd_ps(qv[h], kv, a[h][i]);
    }
  }
}

// q_h . k_i for G heads (q_h = q + h * hd) x 4 keys (k + i * stride): dot4()'s partials and tree
// per (head, key). G = 3: 12 accumulators + 3 query vectors + 1 key vector = the 16 ymm registers.
template <int G, typename Elem>
EMBER_AVX2_INLINE void group_dot4(const float* q, int64_t hd, const Elem* k, int64_t stride,
                                  __m128 (&out)[G]) {
  __m256 a[G][4];
  zero_accumulators(a);
  if constexpr (kQuantizedKvRow<Elem>) {
    // Key by key within each block of 32 (hd % 32 == 0), so that a key's scale is widened once
    // per block, not once per 8 values, and one scale register is live beside the 12
    // accumulators; the queries come from L1 as FMA operands. Each accumulator still takes its
    // FMAs in increasing d: the same bits as group_dot4_chunks.
    for (int64_t blk = 0; blk < hd / kQuantBlock; ++blk) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const Elem& b = k[i * stride + blk];
        const __m256 scale = kv_block_scale(b);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m256 kv = kv_block_chunk(b, scale, c);
          const float* qd = q + blk * kQuantBlock + 8 * c;
#pragma GCC unroll 4
          for (int h = 0; h < G; ++h) {
            a[h][i] = _mm256_fmadd_ps(_mm256_loadu_ps(qd + h * hd), kv, a[h][i]);
          }
        }
      }
    }
  } else {
    group_dot4_chunks(q, hd, k, stride, a);
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    const __m256 t = hadd_tree4(a[h]);
    out[h] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  }
}

// step_scores() for the G heads at once: head h's scores at s + h * s_stride.
template <int G, typename Elem>
EMBER_AVX2_INLINE void group_step_scores(const float* q, const Elem* const* blocks, int64_t bs,
                                         int64_t n, int64_t row_stride, int64_t hd, float scale,
                                         int64_t n_pad, float* s, int64_t s_stride) {
  const __m128 scale4 = _mm_set1_ps(scale);
  for (int64_t b = 0; b * bs < n; ++b) {
    const Elem* kb = blocks[b];
    const int64_t nb = std::min(bs, n - b * bs);
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
      __m128 d4[G];
      group_dot4<G>(q, hd, kb + i * row_stride, row_stride, d4);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h)
        _mm_storeu_ps(s + h * s_stride + b * bs + i, _mm_mul_ps(d4[h], scale4));
    }
    for (; i < nb; ++i) {
      for (int h = 0; h < G; ++h) {
        s[h * s_stride + b * bs + i] = dot_row(q + h * hd, kb + i * row_stride, hd) * scale;
      }
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t i = n; i < n_pad; ++i) s[h * s_stride + i] = -INFINITY;
  }
}

// acc_h[d, d + 8 NV) += sum_i p_h[i] * v_i[d, d + 8 NV) for the G heads (acc_h = acc + h *
// acc_stride, p_h = p + h * p_stride) over n rows v_i = v + i * stride: accumulate_pv()'s order.
// G = 3, NV = 4: 12 accumulators + 3 broadcasts + 1 value vector.
template <int G, int NV, typename Elem>
EMBER_AVX2_INLINE void group_pv_chunk(float* acc, int64_t acc_stride, const float* p,
                                      int64_t p_stride, const Elem* v, int64_t stride, int64_t n,
                                      int64_t d) {
  __m256 a[G][NV];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) a[h][c] = _mm256_loadu_ps(acc + h * acc_stride + d + 8 * c);
  }
  for (int64_t i = 0; i < n; ++i) {
    __m256 pb[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) pb[h] = _mm256_broadcast_ss(p + h * p_stride + i);
    const Elem* vi = v + i * stride;
    if constexpr (kQuantizedKvRow<Elem> && NV == 4) {
      // The chunk is one whole block (d % 32 == 0 where hd % 32 == 0): its scale widened once.
      const Elem& b = vi[d / kQuantBlock];
      const __m256 scale = kv_block_scale(b);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        const __m256 vv = kv_block_chunk(b, scale, c);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) a[h][c] = _mm256_fmadd_ps(pb[h], vv, a[h][c]);
      }
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        const __m256 vv = load_kv8(vi, d + 8 * c);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) a[h][c] = _mm256_fmadd_ps(pb[h], vv, a[h][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(acc + h * acc_stride + d + 8 * c, a[h][c]);
  }
}

template <int G, typename Elem>
EMBER_AVX2_INLINE void group_pv(float* acc, int64_t acc_stride, const float* p, int64_t p_stride,
                                const Elem* v, int64_t stride, int64_t n, int64_t hd) {
  int64_t d = 0;
  for (; d + 32 <= hd; d += 32) group_pv_chunk<G, 4>(acc, acc_stride, p, p_stride, v, stride, n, d);
  switch ((hd - d) / 8) {
    case 3:
      return group_pv_chunk<G, 3>(acc, acc_stride, p, p_stride, v, stride, n, d);
    case 2:
      return group_pv_chunk<G, 2>(acc, acc_stride, p, p_stride, v, stride, n, d);
    case 1:
      return group_pv_chunk<G, 1>(acc, acc_stride, p, p_stride, v, stride, n, d);
    default:
      return;
  }
}

// The step's weights for V group c by kv_pv_q8.h's rule, 8 keys a vector (the bits of the
// AVX-512 kernel's 16): q [G][n_pad] rounded (0 past n: d is 0 there) and each head's W / 32767 in
// back (0: the head adds nothing). p: the heads' weights, p_stride apart, readable up to n_pad.
template <int G>
EMBER_AVX2_INLINE void pv_q8_weights(const float* p, int64_t p_stride, const float* d,
                                     int64_t n_pad, int16_t* q, float (&back)[G]) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int h = 0; h < G; ++h) {
    const float* ph = p + h * p_stride;
    __m256 top = _mm256_setzero_ps();
    for (int64_t i = 0; i < n_pad; i += 8) {
      const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(ph + i), _mm256_loadu_ps(d + i));
      top = _mm256_max_ps(top, _mm256_and_ps(w, magnitude));
    }
    const float w_max = hmax(top);
    float to_levels = 0.0f;
    pv_q8_scales(w_max, &back[h], &to_levels);
    const __m256 r = _mm256_set1_ps(to_levels);
    for (int64_t i = 0; i < n_pad; i += 8) {
      const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(ph + i), _mm256_loadu_ps(d + i));
      const __m256i q32 = _mm256_cvtps_epi32(_mm256_mul_ps(w, r));
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(q + h * n_pad + i),
          _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1)));
    }
  }
}

// Values 16 half .. 16 half + 15 of group c of rows a and b as word pairs (a's value, b's value)
// per 32-bit lane, values in order (lo: the first 8, hi: the next 8): q8_0's bytes interleaved and
// sign-extended; q4_0's nibbles (low ones for half 0, high for half 1) minus 8.
template <typename Block>
EMBER_AVX2_INLINE void pv_pair_words(const Block& a, const Block& b, int half, __m256i& lo,
                                     __m256i& hi) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs + 16 * half));
    const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * half));
    lo = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb));
    hi = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(va, vb));
  } else {
    __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs));
    __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    if (half == 1) {
      va = _mm_srli_epi16(va, 4);
      vb = _mm_srli_epi16(vb, 4);
    }
    const __m128i nibble = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    va = _mm_sub_epi8(_mm_and_si128(va, nibble), eight);
    vb = _mm_sub_epi8(_mm_and_si128(vb, nibble), eight);
    lo = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb));
    hi = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(va, vb));
  }
}

// acc_h += P V of a whole step over a q8_0 / q4_0 V cache (hd % 32 == 0) by kv_pv_q8.h's rule:
// keys two at a time as word pairs (pv_pair_words), one pmaddwd per head and 8 values (the
// integers of the AVX-512 kernel's vpdpwssd, so its bits). 16 values a pass keep the accumulators
// in registers.
template <int G, typename Block>
EMBER_AVX2_INLINE void group_pv_q8(float* acc, int64_t acc_stride, const float* p, int64_t p_stride,
                                   const Block* const* vb, int64_t bs, int64_t n, int64_t v_stride,
                                   int64_t hd) {
  thread_local PvIntScratch<Block> scratch;
  const int64_t n_pad = scratch.reserve(n, 8, G, 1);  // past an odd n: one row under weight 0
  const Block** rows = scratch.rows.data();
  pv_q8_step_rows(vb, bs, n, v_stride, n_pad, rows);
  int16_t* q = scratch.q.data();
  float* d = scratch.d.data();
  for (int64_t c = 0; c < hd / kQuantBlock; ++c) {
    for (int64_t i = 0; i < n; ++i) d[i] = _cvtsh_ss(rows[i][c].d);
    for (int64_t i = n; i < n_pad; ++i) d[i] = 0.0f;
    float back[G];
    pv_q8_weights<G>(p, p_stride, d, n_pad, q, back);
    for (int64_t k0 = 0; k0 < n; k0 += kPvQ8ChunkKeys) {
      const int64_t k1 = std::min(n, k0 + kPvQ8ChunkKeys);
      for (int half = 0; half < 2; ++half) {
        __m256i o[G][2];
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) o[h][0] = o[h][1] = _mm256_setzero_si256();
        for (int64_t i = k0; i < k1; i += 2) {
          __m256i lo, hi;
          pv_pair_words(rows[i][c], rows[i + 1][c], half, lo, hi);
#pragma GCC unroll 4
          for (int h = 0; h < G; ++h) {
            const __m256i x = _mm256_set1_epi32(load_u32(q + h * n_pad + i));
            o[h][0] = _mm256_add_epi32(o[h][0], _mm256_madd_epi16(lo, x));
            o[h][1] = _mm256_add_epi32(o[h][1], _mm256_madd_epi16(hi, x));
          }
        }
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) {
          if (back[h] == 0.0f) continue;
          float* ah = acc + h * acc_stride + c * kQuantBlock + 16 * half;
          const __m256 sb = _mm256_set1_ps(back[h]);
          _mm256_storeu_ps(ah,
                           _mm256_fmadd_ps(_mm256_cvtepi32_ps(o[h][0]), sb, _mm256_loadu_ps(ah)));
          _mm256_storeu_ps(
              ah + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(o[h][1]), sb, _mm256_loadu_ps(ah + 8)));
        }
      }
    }
  }
}

}  // namespace ember::cpu::avx2
