// Internal to the CPU backend's AVX2 attention (avx2_attention.cpp): the scores of G query heads
// against a q8_0 K cache as integer dot products (backend/kv_query_q8.h), 8 keys at a time.
// Include only from files compiled for AVX2 (functions carry EMBER_AVX2_INLINE).
//
// Per key, head and group: VPMADDUBSW of |q8| with the key's codes signed by q8 (llama.cpp's way
// without VNNI; codes lie in [-127, 127], so no pair of products saturates 16 bits), VPMADDWD to
// 32 bits, then the 8 keys' partial sums reduced together, keys in lanes. The integer sums are
// exact, so these are the bits of the AVX-512 kernel (avx512_q8_scores.h) and of q8_key_score:
// the float part runs in kv_query_q8.h's order, lane by lane.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kv_query_q8.h"

namespace ember::cpu::avx2 {

// Lane j: the sum of p[j]'s 8 lanes.
EMBER_AVX2_INLINE __m256i sum_lanes8x8(const __m256i (&p)[8]) {
  // Per 128-bit half: pairs, then quads, of keys 0..3 (a) and 4..7 (b).
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// Scores (times scale) of the G heads of qq (head h's hd / 32 blocks at qq + h * hd / 32) for the
// 8 keys rows[j] (each hd / 32 blocks): out[h] lane j.
template <int G>
EMBER_AVX2_INLINE void q8_scores8(const BlockQ8Act* qq, const BlockQ8_0* const (&rows)[8],
                                  int64_t hd, float scale, __m256 (&out)[G]) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) out[h] = _mm256_setzero_ps();
  for (int64_t g = 0; g < hd / kQuantBlock; ++g) {
    const __m256 dk = _mm256_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(rows[0][g].d), static_cast<int16_t>(rows[1][g].d),
                       static_cast<int16_t>(rows[2][g].d), static_cast<int16_t>(rows[3][g].d),
                       static_cast<int16_t>(rows[4][g].d), static_cast<int16_t>(rows[5][g].d),
                       static_cast<int16_t>(rows[6][g].d), static_cast<int16_t>(rows[7][g].d)));
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      const BlockQ8Act& q = qq[h * (hd / kQuantBlock) + g];
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qs));
      const __m256i qa = _mm256_sign_epi8(qv, qv);  // |q8|: the unsigned operand
      __m256i p[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j][g].qs));
        p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(k, qv)), ones);
      }
      const __m256 x = _mm256_cvtepi32_ps(sum_lanes8x8(p));
      const __m256 w = _mm256_mul_ps(_mm256_set1_ps(q.d), dk);
      out[h] = g == 0 ? _mm256_mul_ps(x, w) : _mm256_fmadd_ps(x, w, out[h]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) out[h] = _mm256_mul_ps(out[h], _mm256_set1_ps(scale));
}

// group_step_scores for a q8_0 K cache (hd % 32 == 0): the step's n keys (blocks of bs rows,
// row_stride blocks apart) 8 at a time, the last key repeated into the lanes past n; head h's
// scores at s + h * s_stride, -inf in [n, n_pad).
template <int G>
EMBER_AVX2_INLINE void q8_step_scores(const BlockQ8Act* qq, const BlockQ8_0* const* blocks,
                                      int64_t bs, int64_t n, int64_t row_stride, int64_t hd,
                                      float scale, int64_t n_pad, float* s, int64_t s_stride) {
  const BlockQ8_0* rows[8];
  for (int64_t i0 = 0; i0 < n; i0 += 8) {
    const int64_t m = std::min<int64_t>(8, n - i0);
    step_key_rows(blocks, bs, row_stride, i0, n, rows);
    __m256 out[G];
    q8_scores8<G>(qq, rows, hd, scale, out);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) _mm256_maskstore_ps(s + h * s_stride + i0, mask, out[h]);
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t i = n; i < n_pad; ++i) s[h * s_stride + i] = -INFINITY;
  }
}

}  // namespace ember::cpu::avx2
