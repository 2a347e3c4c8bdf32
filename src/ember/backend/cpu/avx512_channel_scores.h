// Internal to the CPU backend's AVX-512 attention steps (avx512_attention_step.cpp):
// kv_channel_query.h's integer scores against a sealed per-channel q4_0 K block, 16 keys in the
// lanes of a 512-bit vector (8 in a 256-bit one where a block has 8 more): one load per code column
// (4 channels of each nibble), then per folded query four vpdpbusd (the two nibbles against the hi
// and lo bytes). The sums are exact, so the bits are avx2::channel_scores8's.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "ember/backend/cpu/avx2_channel_scores.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kv_channel_query.h"

namespace ember::cpu::avx512 {

inline constexpr auto kLanes = static_cast<__mmask16>(0xffff);       // 16 x 32 bits
inline constexpr auto kWords = static_cast<__mmask32>(0xffffffffu);  // 32 x 16 bits

template <bool kMax>
EMBER_AVX512_INLINE __m512 reduce_op(__m512 a, __m512 b) {
  return kMax ? _mm512_maskz_max_ps(kLanes, a, b) : _mm512_add_ps(a, b);
}

// Lane 4h of the result: the reduction of head h's 16 lanes (G <= 4), for G heads at once. A sum
// (kMax false) adds lanes t and t + 8, then follows avx2::hsum's tree ((t0 + t4) + (t2 + t6)) +
// ((t1 + t5) + (t3 + t7)): the rule's order for the bias. kMax: the largest lane.
template <int G, bool kMax>
EMBER_AVX512_INLINE __m512 reduce_heads(const __m512 (&v)[G]) {
  static_assert(G >= 1 && G <= 4, "up to four heads");
  const auto pair = [&](__m512 a, __m512 b) EMBER_AVX512_LAMBDA {  // lanes 0-7: a's t + (t + 8)
    return reduce_op<kMax>(_mm512_maskz_shuffle_f32x4(kLanes, a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_maskz_shuffle_f32x4(kLanes, a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  };
  const __m512 x01 = pair(v[0], v[G > 1 ? 1 : 0]);
  const __m512 x23 = G > 2 ? pair(v[2], v[G > 3 ? 3 : 2]) : x01;
  // Quarter h: head h's u_t + u_(t + 4).
  const __m512 y =
      reduce_op<kMax>(_mm512_maskz_shuffle_f32x4(kLanes, x01, x23, _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_maskz_shuffle_f32x4(kLanes, x01, x23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 z = reduce_op<kMax>(y, _mm512_maskz_permute_ps(kLanes, y, _MM_SHUFFLE(1, 0, 3, 2)));
  return reduce_op<kMax>(z, _mm512_maskz_permute_ps(kLanes, z, _MM_SHUFFLE(2, 3, 0, 1)));
}

// avx2::fold_channel_queries on 512-bit vectors, hd = 16 kChunks (the same bits: one 16-lane bias
// accumulator is the rule's 16 lanes; the folded queries stay in registers between the passes).
// The G heads' maxima and bias sums are reduced together, their two divisions on one vector.
template <int G, int kChunks>
EMBER_AVX512_INLINE void fold_channel_chunks(const float* q, const uint8_t* region,
                                             ChannelQuery* out) {
  static_assert(kChunks % 4 == 0, "the packs take four chunks at a time");
  constexpr int64_t hd = 16 * kChunks, chunks = kChunks;
  const auto* scale = reinterpret_cast<const uint16_t*>(region);
  const uint16_t* min = scale + hd;
  __m512 folded[G][kChunks];
  __m512 amax[G], bias[G];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) amax[h] = bias[h] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int64_t k = 0; k < chunks; ++k) {
    const __m512 s = _mm512_maskz_cvtph_ps(
        kLanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scale + 16 * k)));
    const __m512 mn = _mm512_maskz_cvtph_ps(
        kLanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(min + 16 * k)));
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      const __m512 qv = _mm512_loadu_ps(q + h * hd + 16 * k);
      folded[h][k] = _mm512_mul_ps(qv, s);
      amax[h] = _mm512_maskz_max_ps(kLanes, amax[h], _mm512_abs_ps(folded[h][k]));
      bias[h] = _mm512_fmadd_ps(qv, mn, bias[h]);
    }
  }
  // Lanes 0, 4, 8, 12 of the reductions are heads 0-3: gathered into one 128-bit vector each.
  const __m512i heads = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const auto first4 = [&](__m512 v) EMBER_AVX512_LAMBDA {
    return _mm512_maskz_extractf32x4_ps(0xF, _mm512_maskz_permutexvar_ps(kLanes, heads, v), 0);
  };
  const __m128 A = first4(reduce_heads<G, true>(amax));
  alignas(16) float a[4], b[4], inv[4];
  _mm_store_ps(a, _mm_div_ps(A, _mm_set1_ps(kChannelQueryLevels)));
  _mm_store_ps(b, first4(reduce_heads<G, false>(bias)));
  _mm_store_ps(inv, _mm_maskz_div_ps(_mm_cmp_ps_mask(A, _mm_setzero_ps(), _CMP_GT_OQ),
                                     _mm_set1_ps(kChannelQueryLevels), A));
  const __m512i low7 = _mm512_set1_epi16(127);
  // After the two packs, 128-bit lane L of 4 chunks' bytes holds (chunk k, lane L) at dword 4L + k;
  // channel 16k + 4L + e belongs at dword 4k + L.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  constexpr auto kWords = static_cast<__mmask32>(0xffffffffu);
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    out[h].a = a[h];
    out[h].bias = b[h];
    const __m512 scale_h = _mm512_set1_ps(inv[h]);
#pragma GCC unroll 2
    for (int64_t k = 0; k < chunks; k += 4) {
      __m512i qi[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        qi[t] = _mm512_maskz_cvtps_epi32(kLanes, _mm512_mul_ps(folded[h][k + t], scale_h));
      }
      // qi in 16 bits (|qi| <= 16383; a NaN's INT32_MIN saturates to -32768), then hi = qi >> 7
      // and lo = qi & 127 per word, then bytes with signed saturation: cvtsepi32_epi8's bytes.
      const __m512i w01 = _mm512_packs_epi32(qi[0], qi[1]), w23 = _mm512_packs_epi32(qi[2], qi[3]);
      const __m512i hi = _mm512_packs_epi16(_mm512_maskz_srai_epi16(kWords, w01, 7),
                                            _mm512_maskz_srai_epi16(kWords, w23, 7));
      const __m512i lo =
          _mm512_packs_epi16(_mm512_and_si512(w01, low7), _mm512_and_si512(w23, low7));
      _mm512_store_si512(out[h].hi + 16 * k, _mm512_maskz_permutexvar_epi32(kLanes, order, hi));
      _mm512_store_si512(out[h].lo + 16 * k, _mm512_maskz_permutexvar_epi32(kLanes, order, lo));
    }
  }
}

template <int G>
EMBER_AVX512_INLINE void fold_channel_queries(const float* q, const uint8_t* region, int64_t hd,
                                              ChannelQuery* out) {
  switch (hd) {
    case 64:
      return fold_channel_chunks<G, 4>(q, region, out);
    case 128:
      return fold_channel_chunks<G, 8>(q, region, out);
    default:
      return avx2::fold_channel_queries<G>(q, region, hd, out);
  }
}

// Keys i..i+15 of a sealed block (codes: its code words, bs rows a column) for G folded queries.
// Two accumulators per byte part (low and high nibbles) keep four independent chains per head.
template <int G>
EMBER_AVX512_INLINE void channel_scores16(const ChannelQuery* cq, const uint8_t* codes, int64_t bs,
                                          int64_t i, int64_t hd, float scale, float* s,
                                          int64_t s_stride) {
  const int64_t cols = hd / 8;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512i hi_l[G], lo_l[G], hi_h[G], lo_h[G];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) hi_l[h] = lo_l[h] = hi_h[h] = lo_h[h] = _mm512_setzero_si512();
  for (int64_t j = 0; j < cols; ++j) {
    const __m512i w = _mm512_loadu_si512(codes + 4 * (j * bs + i));
    const __m512i ln = _mm512_and_si512(w, nibble);
    const __m512i hn = _mm512_and_si512(_mm512_maskz_srli_epi16(kWords, w, 4), nibble);
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      using avx2::channel_word;
      hi_l[h] = _mm512_dpbusd_epi32(hi_l[h], ln, _mm512_set1_epi32(channel_word(cq[h].hi, j)));
      lo_l[h] = _mm512_dpbusd_epi32(lo_l[h], ln, _mm512_set1_epi32(channel_word(cq[h].lo, j)));
      hi_h[h] =
          _mm512_dpbusd_epi32(hi_h[h], hn, _mm512_set1_epi32(channel_word(cq[h].hi, cols + j)));
      lo_h[h] =
          _mm512_dpbusd_epi32(lo_h[h], hn, _mm512_set1_epi32(channel_word(cq[h].lo, cols + j)));
    }
  }
  const __m512 scale16 = _mm512_set1_ps(scale);
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    // maskz_ forms: GCC 12's unmasked ones read an undefined vector (-Wmaybe-uninitialized).
    const __m512i dot =
        _mm512_add_epi32(_mm512_maskz_slli_epi32(kLanes, _mm512_add_epi32(hi_l[h], hi_h[h]), 7),
                         _mm512_add_epi32(lo_l[h], lo_h[h]));
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kLanes, dot), _mm512_set1_ps(cq[h].a),
                                     _mm512_set1_ps(cq[h].bias));
    _mm512_storeu_ps(s + h * s_stride + i, _mm512_mul_ps(x, scale16));
  }
}

// channel_scores16 for keys i..i+7 on 256-bit vectors (AVX512_VNNI with VL).
template <int G>
EMBER_AVX512_INLINE void channel_scores8(const ChannelQuery* cq, const uint8_t* codes, int64_t bs,
                                         int64_t i, int64_t hd, float scale, float* s,
                                         int64_t s_stride) {
  const int64_t cols = hd / 8;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256i hi[G], lo[G];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) hi[h] = lo[h] = _mm256_setzero_si256();
  for (int64_t j = 0; j < cols; ++j) {
    const __m256i w =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 4 * (j * bs + i)));
    const __m256i ln = _mm256_and_si256(w, nibble);
    const __m256i hn = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      using avx2::channel_word;
      hi[h] = _mm256_dpbusd_epi32(hi[h], ln, _mm256_set1_epi32(channel_word(cq[h].hi, j)));
      lo[h] = _mm256_dpbusd_epi32(lo[h], ln, _mm256_set1_epi32(channel_word(cq[h].lo, j)));
      hi[h] = _mm256_dpbusd_epi32(hi[h], hn, _mm256_set1_epi32(channel_word(cq[h].hi, cols + j)));
      lo[h] = _mm256_dpbusd_epi32(lo[h], hn, _mm256_set1_epi32(channel_word(cq[h].lo, cols + j)));
    }
  }
  const __m256 scale8 = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    const __m256i dot = _mm256_add_epi32(_mm256_slli_epi32(hi[h], 7), lo[h]);
    const __m256 x = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(cq[h].a),
                                     _mm256_set1_ps(cq[h].bias));
    _mm256_storeu_ps(s + h * s_stride + i, _mm256_mul_ps(x, scale8));
  }
}

}  // namespace ember::cpu::avx512
