// Internal to the AVX-512 attention step (avx512_attention_step.cpp): P V over a q8_0 or q4_0 V
// cache in integers by kv_pv_q8.h's rule, on 512-bit vectors (the AVX2 kernel,
// avx2_attention_group.h, gives the same bits: the integer sums are exact, the float steps the same
// per lane). Include only from files compiled for AVX-512 (functions carry EMBER_AVX512_INLINE).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/avx512_q8_scores.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kv_pv_q8.h"

namespace ember::cpu::avx512 {

// (Zero-masked forms with every lane where GCC 12's plain ones read an "undefined" vector and
// warn.)
inline constexpr auto kPvAll = static_cast<__mmask16>(0xffff);
inline constexpr auto kPvLow8 = static_cast<__mmask8>(0xff);

// The step's weights for one V group by kv_pv_q8.h's rule: head h's rounded into q + h * q_stride
// [n_pad] (0 past n), its W / 32767 into back[h] (0: the head adds nothing). p: the heads'
// weights, p_stride apart; d: the group's scales.
template <int G>
EMBER_AVX512_INLINE void pv_q8_weights(const float* p, int64_t p_stride, const float* d, int64_t n,
                                       int64_t n_pad, int16_t* q, int64_t q_stride, float* back) {
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int h = 0; h < G; ++h) {
    const float* ph = p + h * p_stride;
    const auto weights = [&](int64_t i) EMBER_AVX512_LAMBDA {
      const auto k = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
      return _mm512_mul_ps(_mm512_maskz_loadu_ps(k, ph + i), _mm512_maskz_loadu_ps(k, d + i));
    };
    __m512 top = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      top = _mm512_maskz_max_ps(kPvAll, top, _mm512_and_ps(weights(i), magnitude));
    }
    const float w_max = avx2::hmax(_mm256_max_ps(_mm512_maskz_extractf32x8_ps(kPvLow8, top, 0),
                                                 _mm512_maskz_extractf32x8_ps(kPvLow8, top, 1)));
    float to_levels = 0.0f;
    pv_q8_scales(w_max, &back[h], &to_levels);
    const __m512 r = _mm512_set1_ps(to_levels);
    for (int64_t i = 0; i < n_pad; i += 16) {
      const __m512i q32 = _mm512_maskz_cvtps_epi32(kPvAll, _mm512_mul_ps(weights(i), r));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + h * q_stride + i),
                          _mm512_maskz_cvtsepi32_epi16(kPvAll, q32));  // saturating, as packs
    }
  }
}

// The rows of a step's n keys into rows [n_pad), the last one repeated past n; blocks of a
// multiple of 8 rows 8 at a time.
template <typename Block>
EMBER_AVX512_INLINE void pv_q8_rows(const Block* const* vb, int64_t bs, int64_t n, int64_t v_stride,
                                    int64_t n_pad, const Block** rows) {
  if (bs % 8 != 0) return pv_q8_step_rows(vb, bs, n, v_stride, n_pad, rows);
  const int64_t row_bytes = v_stride * static_cast<int64_t>(sizeof(Block));
  const __m512i steps =
      _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(row_bytes));
  for (int64_t b = 0; b * bs < n; ++b) {
    const int64_t rows_here = std::min(bs, n - b * bs);
    const auto base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(vb[b]));
    for (int64_t r = 0; r < rows_here; r += 8) {  // up to 7 past the step: rows of the block
      _mm512_storeu_si512(rows + b * bs + r,
                          _mm512_add_epi64(_mm512_set1_epi64(base + r * row_bytes), steps));
    }
  }
  for (int64_t i = n; i < n_pad; ++i) rows[i] = rows[n - 1];
}

// Group c of rows a and b as word pairs (a's value, b's value) per 32-bit lane: q8_0's bytes
// interleaved and sign-extended, lanes values 0-7, 16-23 (lo) and 8-15, 24-31 (hi); q4_0's
// nibbles as they are stored (0..15: the pass takes 8 times the weights' sum off), lanes values
// 0-15 (lo: the low nibbles) and 16-31 (hi).
template <typename Block>
EMBER_AVX512_INLINE void pv_pair_words(const Block& a, const Block& b, __m512i& lo, __m512i& hi) {
  constexpr auto kAll32 = static_cast<__mmask32>(0xffffffffu);
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    lo = _mm512_maskz_cvtepi8_epi16(kAll32, _mm256_unpacklo_epi8(va, vb));
    hi = _mm512_maskz_cvtepi8_epi16(kAll32, _mm256_unpackhi_epi8(va, vb));
  } else {
    // Each row's 16 bytes in every 128-bit lane (broadcast loads, no shuffle); lane L's lanes
    // 4L..4L+3 take byte 4L + j of a into their byte 0 and of b into their byte 2 (one in-lane
    // byte shuffle each, zero-masked / merged), bytes 1 and 3 stay 0: words of 0..255.
    const __m512i ra = _mm512_maskz_broadcast_i32x4(
        kPvAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs)));
    const __m512i rb = _mm512_maskz_broadcast_i32x4(
        kPvAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    const __m512i pick =
        _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A,
                         0x09090909, 0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                         0x03030303, 0x02020202, 0x01010101, 0x00000000);
    constexpr auto kByte0 = static_cast<__mmask64>(0x1111111111111111ull);
    const __m512i w = _mm512_mask_shuffle_epi8(_mm512_maskz_shuffle_epi8(kByte0, ra, pick),
                                               kByte0 << 2, rb, pick);
    lo = _mm512_and_si512(w, _mm512_set1_epi16(0x0F));
    hi = _mm512_maskz_srli_epi16(kAll32, w, 4);
  }
}

// 8 times the sum of one head's rounded weights over keys [k0, k1) (k1 - k0 a multiple of 16):
// what the q4_0 nibbles' offset of 8 takes off the chunk's integer sums.
EMBER_AVX512_INLINE int32_t q4_offset_sum(const int16_t* q, int64_t k0, int64_t k1) {
  const __m512i ones = _mm512_set1_epi16(1);
  __m512i s = _mm512_setzero_si512();
  for (int64_t i = k0; i < k1; i += 32) {
    const auto m = static_cast<__mmask32>(k1 - i >= 32 ? 0xffffffffu : 0xffffu);
    s = _mm512_dpwssd_epi32(s, _mm512_maskz_loadu_epi16(m, q + i), ones);
  }
  const __m256i h = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(kPvLow8, s, 0),
                                     _mm512_maskz_extracti64x4_epi64(kPvLow8, s, 1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
  return 8 * (_mm_cvtsi128_si32(t) + _mm_extract_epi32(t, 1));
}

// acc_h += P V of a whole step over a q8_0 / q4_0 V cache (hd % 32 == 0) by kv_pv_q8.h's rule, NC
// (1 or 2) V groups from c0 a pass. Keys two at a time (pv_pair_words), so one vpdpwssd per head
// adds both keys' products; q8_0's lanes go back in order once per chunk of keys. q:
// [G][NC][n_pad], back: [G][NC].
template <int G, int NC, typename Block>
EMBER_AVX512_INLINE void pv_q8_pass(float* acc, int64_t acc_stride, const Block* const* rows,
                                    int64_t n, int64_t n_pad, int64_t c0, const int16_t* q,
                                    const float* back) {
  constexpr bool kQ8 = std::is_same_v<Block, BlockQ8_0>;
  const __m512i first =
      kQ8 ? _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
          : _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(kQ8 ? 8 : 16));
  for (int64_t k0 = 0; k0 < n; k0 += kPvQ8ChunkKeys) {
    const int64_t k1 = std::min(n, k0 + kPvQ8ChunkKeys);
    __m512i o[G][NC][2];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
#pragma GCC unroll 2
      for (int c = 0; c < NC; ++c) o[h][c][0] = o[h][c][1] = _mm512_setzero_si512();
    }
    for (int64_t i = k0; i < k1; i += 2) {
#pragma GCC unroll 2
      for (int c = 0; c < NC; ++c) {
        __m512i lo, hi;
        pv_pair_words(rows[i][c0 + c], rows[i + 1][c0 + c], lo, hi);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) {
          const __m512i x =
              _mm512_set1_epi32(static_cast<int>(avx2::load_u32(q + (h * NC + c) * n_pad + i)));
          o[h][c][0] = _mm512_dpwssd_epi32(o[h][c][0], lo, x);
          o[h][c][1] = _mm512_dpwssd_epi32(o[h][c][1], hi, x);
        }
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
#pragma GCC unroll 2
      for (int c = 0; c < NC; ++c) {
        const float sb = back[h * NC + c];
        if (sb == 0.0f) continue;
        if constexpr (!kQ8) {  // the nibbles' offset, exact in int32 (n_pad keys: 0 past n)
          const __m512i off = _mm512_set1_epi32(
              q4_offset_sum(q + (h * NC + c) * n_pad, k0, std::min(n_pad, k0 + kPvQ8ChunkKeys)));
          o[h][c][0] = _mm512_sub_epi32(o[h][c][0], off);
          o[h][c][1] = _mm512_sub_epi32(o[h][c][1], off);
        }
        float* ah = acc + h * acc_stride + (c0 + c) * kQuantBlock;
        const __m512 v0 = _mm512_maskz_cvtepi32_ps(
            kPvAll, _mm512_permutex2var_epi32(o[h][c][0], first, o[h][c][1]));
        const __m512 v1 = _mm512_maskz_cvtepi32_ps(
            kPvAll, _mm512_permutex2var_epi32(o[h][c][0], second, o[h][c][1]));
        _mm512_storeu_ps(ah, _mm512_fmadd_ps(v0, _mm512_set1_ps(sb), _mm512_loadu_ps(ah)));
        _mm512_storeu_ps(ah + 16,
                         _mm512_fmadd_ps(v1, _mm512_set1_ps(sb), _mm512_loadu_ps(ah + 16)));
      }
    }
  }
}

// acc_h += P V of a whole step over a q8_0 / q4_0 V cache (hd % 32 == 0) by kv_pv_q8.h's rule:
// the rows and every V group's scales (gathered) once, then two V groups a pass.
template <int G, typename Block>
EMBER_AVX512_INLINE void group_pv_q8(float* acc, int64_t acc_stride, const float* p,
                                     int64_t p_stride, const Block* const* vb, int64_t bs,
                                     int64_t n, int64_t v_stride, int64_t hd) {
  thread_local PvIntScratch<Block> scratch;
  const int64_t groups = hd / kQuantBlock;
  const int64_t n_pad = scratch.reserve(n, 16, 2 * G, groups);
  const Block** rows = scratch.rows.data();
  pv_q8_rows(vb, bs, n, v_stride, n_pad, rows);
  float* d = scratch.d.data();
  for (int64_t i = 0; i < n_pad; i += 16) {
    const __m512i lo = _mm512_loadu_si512(rows + i), hi = _mm512_loadu_si512(rows + i + 8);
    for (int64_t c = 0; c < groups; ++c) {
      _mm512_storeu_ps(d + c * n_pad + i, gather_q8_scales<Block>(lo, hi, c));
    }
  }
  int16_t* q = scratch.q.data();
  for (int64_t c0 = 0; c0 < groups; c0 += 2) {
    const int nc = groups - c0 >= 2 ? 2 : 1;
    float back[G * 2];
    for (int c = 0; c < nc; ++c) {
      float b[G];
      pv_q8_weights<G>(p, p_stride, d + (c0 + c) * n_pad, n, n_pad, q + c * n_pad, nc * n_pad, b);
      for (int h = 0; h < G; ++h) back[h * nc + c] = b[h];
    }
    if (nc == 2) {
      pv_q8_pass<G, 2>(acc, acc_stride, rows, n, n_pad, c0, q, back);
    } else {
      pv_q8_pass<G, 1>(acc, acc_stride, rows, n, n_pad, c0, q, back);
    }
  }
}

}  // namespace ember::cpu::avx512
