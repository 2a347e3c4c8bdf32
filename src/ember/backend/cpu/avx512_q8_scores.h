// Internal to the AVX-512 attention step (avx512_attention_step.cpp): the scores of G query heads
// against a q8_0 K cache as integer dot products (backend/kv_query_q8.h), 16 keys at a time with
// the keys in the lanes, so no key needs a horizontal reduction of its own.
//
// Per pair of 32-value groups: each key's 64 codes are one vector, offset to unsigned (+128);
// a 16 x 16 transpose of their 32-bit words puts word c of every key in vector c, and VPDPBUSD
// against the query's word c broadcast adds 4 products per key and lane. The offset comes back
// out as 128 * (sum of the group's q8), one subtraction per head. The scales (one per key and
// group) are gathered, and the float part follows kv_query_q8.h's order, lane by lane: the bits of
// q8_key_score and of the AVX2 kernel (avx2_q8_scores.h).
// Cost per 16 keys and group pair: 16 loads, 16 inserts, 16 XORs and 64 shuffles shared by the
// heads, then 16 VPDPBUSD per head, where the f32 kernel spent 4 FMAs per key, head and 8 values
// plus a reduction tree per key and head.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kv_query_q8.h"

namespace ember::cpu::avx512 {

// (Zero-masked forms with every lane where GCC 12's plain ones read an "undefined" vector and
// warn.)
constexpr auto kQ8All16 = static_cast<__mmask16>(0xffff);
constexpr auto kQ8All8 = static_cast<__mmask8>(0xff);

// t[c] <- word c of t[0..15] (lane j from t[j]): a transpose of 32-bit values.
EMBER_AVX512_INLINE void transpose16x16(__m512i (&t)[16]) {
  __m512i a[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    // Per 128-bit lane L of rows x = 2i, y = 2i + 1: (x0, y0, x1, y1) and (x2, y2, x3, y3).
    a[2 * i] = _mm512_maskz_unpacklo_epi32(kQ8All16, t[2 * i], t[2 * i + 1]);
    a[2 * i + 1] = _mm512_maskz_unpackhi_epi32(kQ8All16, t[2 * i], t[2 * i + 1]);
  }
  __m512i b[16];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    // b[4r + k], lane L: word 4L + k of rows 4r .. 4r + 3.
    b[4 * r] = _mm512_maskz_unpacklo_epi64(kQ8All8, a[4 * r], a[4 * r + 2]);
    b[4 * r + 1] = _mm512_maskz_unpackhi_epi64(kQ8All8, a[4 * r], a[4 * r + 2]);
    b[4 * r + 2] = _mm512_maskz_unpacklo_epi64(kQ8All8, a[4 * r + 1], a[4 * r + 3]);
    b[4 * r + 3] = _mm512_maskz_unpackhi_epi64(kQ8All8, a[4 * r + 1], a[4 * r + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    // The 4 x 4 transpose of 128-bit lanes over rows groups 0..3 (b[k], b[4 + k], ...).
    const __m512i p0 =
        _mm512_maskz_shuffle_i32x4(kQ8All16, b[k], b[4 + k], 0x88);  // L0, L2 of groups 0, 1
    const __m512i p1 = _mm512_maskz_shuffle_i32x4(kQ8All16, b[k], b[4 + k], 0xdd);  // L1, L3
    const __m512i p2 = _mm512_maskz_shuffle_i32x4(kQ8All16, b[8 + k], b[12 + k], 0x88);
    const __m512i p3 = _mm512_maskz_shuffle_i32x4(kQ8All16, b[8 + k], b[12 + k], 0xdd);
    t[k] = _mm512_maskz_shuffle_i32x4(kQ8All16, p0, p2, 0x88);       // word k
    t[8 + k] = _mm512_maskz_shuffle_i32x4(kQ8All16, p0, p2, 0xdd);   // word 8 + k
    t[4 + k] = _mm512_maskz_shuffle_i32x4(kQ8All16, p1, p3, 0x88);   // word 4 + k
    t[12 + k] = _mm512_maskz_shuffle_i32x4(kQ8All16, p1, p3, 0xdd);  // word 12 + k
  }
}

// The f16 scale of group g of the 16 rows whose addresses are in addr (8 + 8 pointers), as f32
// (BlockQ8_0 or BlockQ4_0 rows: the scale first in each block).
template <typename Block = BlockQ8_0>
EMBER_AVX512_INLINE __m512 gather_q8_scales(__m512i addr_lo, __m512i addr_hi, int64_t g) {
  const __m512i offset = _mm512_set1_epi64(g * static_cast<int64_t>(sizeof(Block)));
  // 4 bytes from each block's start: its scale in the low 16 bits (little endian).
  const __m256i lo = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), kQ8All8,
                                                 _mm512_add_epi64(addr_lo, offset), nullptr, 1);
  const __m256i hi = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), kQ8All8,
                                                 _mm512_add_epi64(addr_hi, offset), nullptr, 1);
  const __m512i words = _mm512_maskz_inserti64x4(kQ8All8, _mm512_castsi256_si512(lo), hi, 1);
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xffff),
                               _mm512_maskz_cvtepi32_epi16(kQ8All16, words));
}

EMBER_AVX512_INLINE __m512i broadcast_word(const int8_t* q) {
  int32_t w;
  std::memcpy(&w, q, sizeof(w));
  return _mm512_set1_epi32(w);
}

// I_g (kv_query_q8.h) of one head for the 16 keys: t[c0 .. c0 + 8) hold the group's 8 words per
// key (offset by +128), q its 32 query values.
EMBER_AVX512_INLINE __m512i group_sums16(const __m512i* t, const int8_t* q, int32_t q_sum) {
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    a = _mm512_dpbusd_epi32(a, t[c], broadcast_word(q + 4 * c));
    b = _mm512_dpbusd_epi32(b, t[c + 4], broadcast_word(q + 4 * (c + 4)));
  }
  return _mm512_sub_epi32(_mm512_add_epi32(a, b), _mm512_set1_epi32(128 * q_sum));
}

// Scores (times scale) of the G heads of qq (head h's hd / 32 blocks at qq + h * hd / 32) for the
// 16 keys rows[j] (each hd / 32 blocks): out[h] lane j.
template <int G>
EMBER_AVX512_INLINE void q8_scores16(const BlockQ8Act* qq, const BlockQ8_0* const (&rows)[16],
                                     int64_t hd, float scale, __m512 (&out)[G]) {
  const int64_t groups = hd / kQuantBlock;
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) out[h] = _mm512_setzero_ps();
  const __m512i addr_lo = _mm512_loadu_si512(rows), addr_hi = _mm512_loadu_si512(rows + 8);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t g = 0; g < groups; g += 2) {
    const bool pair = g + 1 < groups;
    __m512i t[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j][g].qs));
      const __m256i hi =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j][g + 1].qs))
               : _mm256_setzero_si256();
      t[j] = _mm512_xor_si512(_mm512_maskz_inserti64x4(kQ8All8, _mm512_castsi256_si512(lo), hi, 1),
                              flip);
    }
    transpose16x16(t);
    const __m512 dk0 = gather_q8_scales(addr_lo, addr_hi, g);
    const __m512 dk1 = pair ? gather_q8_scales(addr_lo, addr_hi, g + 1) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      const BlockQ8Act* q = qq + h * groups + g;
      const __m512 x0 = _mm512_maskz_cvtepi32_ps(kQ8All16, group_sums16(t, q[0].qs, q[0].sum));
      const __m512 w0 = _mm512_mul_ps(_mm512_set1_ps(q[0].d), dk0);
      out[h] = g == 0 ? _mm512_mul_ps(x0, w0) : _mm512_fmadd_ps(x0, w0, out[h]);
      if (pair) {
        const __m512 x1 =
            _mm512_maskz_cvtepi32_ps(kQ8All16, group_sums16(t + 8, q[1].qs, q[1].sum));
        const __m512 w1 = _mm512_mul_ps(_mm512_set1_ps(q[1].d), dk1);
        out[h] = _mm512_fmadd_ps(x1, w1, out[h]);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) out[h] = _mm512_mul_ps(out[h], _mm512_set1_ps(scale));
}

// group_step_scores for a q8_0 K cache (hd % 32 == 0): the step's n keys (blocks of bs rows,
// row_stride blocks apart) 16 at a time, the last key repeated into the lanes past n; head h's
// scores at s + h * s_stride, -inf in [n, n_pad).
template <int G>
EMBER_AVX512_INLINE void q8_step_scores(const BlockQ8Act* qq, const BlockQ8_0* const* blocks,
                                        int64_t bs, int64_t n, int64_t row_stride, int64_t hd,
                                        float scale, int64_t n_pad, float* s, int64_t s_stride) {
  const BlockQ8_0* rows[16];
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - i0);
    step_key_rows(blocks, bs, row_stride, i0, n, rows);
    __m512 out[G];
    q8_scores16<G>(qq, rows, hd, scale, out);
    const auto mask = static_cast<__mmask16>((1u << m) - 1u);
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) _mm512_mask_storeu_ps(s + h * s_stride + i0, mask, out[h]);
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t i = n; i < n_pad; ++i) s[h * s_stride + i] = -INFINITY;
  }
}

}  // namespace ember::cpu::avx512
