// Internal to the CPU backend's attention: kv_channel_query.h's integer scores against sealed
// per-channel q4_0 K blocks on AVX2 (8 keys in lanes: pmaddubsw + pmaddwd give vpdpbusd's exact
// sums), and the fold of the queries that the AVX-512 steps share. Include only from files compiled
// for AVX2 or AVX-512 (functions carry EMBER_AVX2_INLINE).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ember/backend/cpu/avx2_attention_group.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kv_channel_query.h"

namespace ember::cpu::avx2 {

// Four consecutive bytes of a folded query (the channels of one code word) as one int32.
EMBER_AVX2_INLINE int32_t channel_word(const int8_t* bytes, int64_t word) {
  int32_t w;
  std::memcpy(&w, bytes + 4 * word, sizeof w);
  return w;
}

// fold_channel_query for G heads (q + h * hd) against one sealed region, hd % 8 == 0: the same
// bits (each channel's products and roundings are lane-wise; the bias's 16 lanes are the even
// 8-channel chunks' accumulator beside the odd chunks').
template <int G>
EMBER_AVX2_INLINE void fold_channel_queries(const float* q, const uint8_t* region, int64_t hd,
                                            ChannelQuery* out) {
  const auto* scale = reinterpret_cast<const uint16_t*>(region);
  const uint16_t* min = scale + hd;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax[G], bias[G][2];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    amax[h] = bias[h][0] = bias[h][1] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < hd; d += 8) {
    const __m256 s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + d)));
    const __m256 mn = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(min + d)));
    const int64_t odd = (d / 8) % 2;
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      const __m256 qv = _mm256_loadu_ps(q + h * hd + d);
      amax[h] = _mm256_max_ps(amax[h], _mm256_and_ps(_mm256_mul_ps(qv, s), magnitude));
      bias[h][odd] = _mm256_fmadd_ps(qv, mn, bias[h][odd]);
    }
  }
  __m256 inv[G];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    const float A = hmax(amax[h]);
    out[h].a = A / kChannelQueryLevels;
    out[h].bias = hsum(_mm256_add_ps(bias[h][0], bias[h][1]));
    inv[h] = _mm256_set1_ps(A > 0.0f ? kChannelQueryLevels / A : 0.0f);
  }
  const __m256i low7 = _mm256_set1_epi32(127);
  // Per 128-bit lane after the packs: hi bytes 0-3, lo bytes 4-7; gathered to hi 0-7, lo 8-15.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
  for (int64_t d = 0; d < hd; d += 8) {
    const __m256 s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + d)));
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      const __m256 folded = _mm256_mul_ps(_mm256_loadu_ps(q + h * hd + d), s);
      const __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(folded, inv[h]));
      const __m256i hi = _mm256_srai_epi32(qi, 7), lo = _mm256_and_si256(qi, low7);
      const __m256i bytes = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(hi, lo), _mm256_setzero_si256()), order);
      const __m128i b = _mm256_castsi256_si128(bytes);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out[h].hi + d), b);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out[h].lo + d), _mm_unpackhi_epi64(b, b));
    }
  }
}

// The int16 pair sums of column j's codes (low nibbles ln, high nibbles hn) against one byte part
// of a folded query.
EMBER_AVX2_INLINE __m256i column_pairs(__m256i ln, __m256i hn, const int8_t* bytes, int64_t j,
                                       int64_t cols) {
  return _mm256_add_epi16(
      _mm256_maddubs_epi16(ln, _mm256_set1_epi32(channel_word(bytes, j))),
      _mm256_maddubs_epi16(hn, _mm256_set1_epi32(channel_word(bytes, cols + j))));
}

// Keys i..i+7 of a sealed block (codes: its code words, bs rows a column) for G folded queries:
// the rule's score of each into s[h * s_stride + i ..]. pmaddubsw pairs stay within int16 over 4
// columns of both nibbles (|pair| <= 15 * 128 * 2, 8 pairs), then pmaddwd widens them.
template <int G>
EMBER_AVX2_INLINE void channel_scores8(const ChannelQuery* cq, const uint8_t* codes, int64_t bs,
                                       int64_t i, int64_t hd, float scale, float* s,
                                       int64_t s_stride) {
  const int64_t cols = hd / 8;
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i hi32[G], lo32[G];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) hi32[h] = lo32[h] = _mm256_setzero_si256();
  for (int64_t j0 = 0; j0 < cols; j0 += 4) {
    __m256i hi16[G], lo16[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) hi16[h] = lo16[h] = _mm256_setzero_si256();
    for (int64_t j = j0; j < std::min(j0 + 4, cols); ++j) {
      const __m256i w =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 4 * (j * bs + i)));
      const __m256i ln = _mm256_and_si256(w, nibble);
      const __m256i hn = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) {
        hi16[h] = _mm256_add_epi16(hi16[h], column_pairs(ln, hn, cq[h].hi, j, cols));
        lo16[h] = _mm256_add_epi16(lo16[h], column_pairs(ln, hn, cq[h].lo, j, cols));
      }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      hi32[h] = _mm256_add_epi32(hi32[h], _mm256_madd_epi16(hi16[h], ones));
      lo32[h] = _mm256_add_epi32(lo32[h], _mm256_madd_epi16(lo16[h], ones));
    }
  }
  const __m256 scale8 = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    const __m256i dot = _mm256_add_epi32(_mm256_slli_epi32(hi32[h], 7), lo32[h]);
    const __m256 x = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(cq[h].a),
                                     _mm256_set1_ps(cq[h].bias));
    _mm256_storeu_ps(s + h * s_stride + i, _mm256_mul_ps(x, scale8));
  }
}

// group_step_scores over a step of per-channel K: sealed blocks (regions) by the integer rule, the
// last one from its exact f16 rows (exact_stride apart) where exact_stride != 0 (the tokens' own
// block, which the walk puts last).
template <int G>
EMBER_AVX2_INLINE void channel_step_scores(const float* q, const uint8_t* const* blocks, int64_t bs,
                                           int64_t n, int64_t exact_stride, int64_t hd, float scale,
                                           int64_t n_pad, float* s, int64_t s_stride) {
  ChannelQuery cq[G];
  for (int64_t b = 0; b * bs < n; ++b) {
    const int64_t nb = std::min(bs, n - b * bs);
    float* sb = s + b * bs;
    if (exact_stride != 0 && (b + 1) * bs >= n) {
      const uint16_t* rows[1] = {reinterpret_cast<const uint16_t*>(blocks[b])};
      group_step_scores<G>(q, rows, bs, nb, exact_stride, hd, scale, nb, sb, s_stride);
      continue;
    }
    fold_channel_queries<G>(q, blocks[b], hd, cq);
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
      channel_scores8<G>(cq, kv_channel_codes(blocks[b], hd), bs, i, hd, scale, sb, s_stride);
    }
    for (; i < nb; ++i) {
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) {
        sb[h * s_stride + i] = channel_key_score(cq[h], blocks[b], i, hd, bs, scale);
      }
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t i = n; i < n_pad; ++i) s[h * s_stride + i] = -INFINITY;
  }
}

}  // namespace ember::cpu::avx2
