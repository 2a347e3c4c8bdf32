// The AVX-512 attention step (attention_step.h): avx2_attention.cpp's grouped token_step on 512-bit
// vectors, bit for bit.
//
// Scores: a key's dot product with a query head is eight accumulator lanes over d (lane l takes
// d = l, l + 8, ... in order) reduced by hadd_tree4's tree. Here one vector holds two keys' lanes
// (key 2p in the low half, 2p + 1 in the high one), so one FMA advances two keys, and the tree is
// rebuilt from even/odd lane permutes ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), 8 keys at
// a time. P V: each output value is a lane of its own over the keys, so 16 consecutive values per
// vector change nothing. Softmax: exponentials per lane (exp16 = avx2::exp), their sum folded into
// 8 lanes in the AVX2 chunk order. q8_0 K: integer scores, 16 keys per vector (avx512_q8_scores.h),
// the AVX2 kernel's bits because the sums are exact; q8_0 V: P V in integers (kv_pv_q8.h,
// avx512_pv_q8.h), two keys per vpdpwssd. Per-channel q4_0 K: integer scores (kv_channel_query.h,
// avx512_channel_scores.h), 16 keys per vector.
//
// BM_Attention (8,192 keys, SmolLM2's 9 heads over 3 kv heads, head_dim 64, one thread, Zen 5):
// see the README's KV cache section for the figures.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/backend/cpu/attention_step.h"
#include "ember/backend/cpu/avx2_attention_group.h"
#include "ember/backend/cpu/avx2_kv_rows.h"
#include "ember/backend/cpu/avx512_channel_scores.h"
#include "ember/backend/cpu/avx512_pv_q8.h"
#include "ember/backend/cpu/avx512_q8_scores.h"
#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu::avx512 {
namespace {

using avx2::Bf16;
using avx2::kQuantizedKvRow;

// (Zero-masked forms with every lane where GCC 12's plain ones read an "undefined" vector and
// warn.)
constexpr auto kLow8 = static_cast<__mmask8>(0xff);
constexpr auto kAll = static_cast<__mmask16>(0xffff);

EMBER_AVX512_INLINE __m256 low_half(__m512 v) {
  return _mm512_maskz_extractf32x8_ps(kLow8, v, 0);
}
EMBER_AVX512_INLINE __m256 high_half(__m512 v) {
  return _mm512_maskz_extractf32x8_ps(kLow8, v, 1);
}

// 16 bf16 values as f32 (their bits in the high half of each lane).
EMBER_AVX512_INLINE __m512 widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}

// 8 bytes at a, then 8 bytes at b.
EMBER_AVX512_INLINE __m128i two_halves(const void* a, const void* b) {
  const __m128i lo = _mm_loadl_epi64(static_cast<const __m128i*>(a));
  return _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(lo), static_cast<const double*>(b)));
}

// Values [d, d + 8) of rows ki and kj as f32: ki's in the low half, kj's in the high one (what
// avx2::load_kv8 gives for each). (Not masked loads: from memory those cost more than the shuffle.)
template <typename Elem>
EMBER_AVX512_INLINE __m512 load_pair8(const Elem* ki, const Elem* kj, int64_t d) {
  if constexpr (std::is_same_v<Elem, float>) {
    return _mm512_maskz_insertf32x8(kAll,
                                    _mm512_maskz_broadcast_f32x8(kAll, _mm256_loadu_ps(ki + d)),
                                    _mm256_loadu_ps(kj + d), 1);
  } else {
    static_assert(sizeof(Elem) == 2, "f16 or bf16 rows");
    const __m256i h = _mm256_inserti128_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ki + d))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kj + d)), 1);
    if constexpr (std::is_same_v<Elem, uint16_t>) return _mm512_maskz_cvtph_ps(kAll, h);
    return widen_bf16(h);
  }
}

// Two q8_0 / q4_0 blocks' scales: bi's in the low half, bj's in the high one.
template <typename Block>
EMBER_AVX512_INLINE __m512 pair_scale(const Block& bi, const Block& bj) {
  return _mm512_mask_blend_ps(static_cast<__mmask16>(0xff00), _mm512_set1_ps(_cvtsh_ss(bi.d)),
                              _mm512_set1_ps(_cvtsh_ss(bj.d)));
}

// Values [8c, 8c + 8) of blocks bi and bj (c = 0..3), as avx2::kv_block_chunk gives each.
template <typename Block>
EMBER_AVX512_INLINE __m512 pair_chunk(const Block& bi, const Block& bj, __m512 scale, int c) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    const __m128i q = two_halves(bi.qs + 8 * c, bj.qs + 8 * c);
    return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, q)),
                         scale);
  } else {
    __m512i q =
        _mm512_maskz_cvtepu8_epi32(kAll, two_halves(bi.qs + 8 * (c % 2), bj.qs + 8 * (c % 2)));
    q = c < 2 ? _mm512_and_si512(q, _mm512_set1_epi32(0x0F)) : _mm512_maskz_srli_epi32(kAll, q, 4);
    return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_sub_epi32(q, _mm512_set1_epi32(8))),
                         scale);
  }
}

// The 8 keys' sums of four two-key accumulators, in hadd_tree4's order per key.
EMBER_AVX512_INLINE __m256 reduce_key_pairs(const __m512 (&a)[4]) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  // Per key: pairs (l0 + l1, l2 + l3, l4 + l5, l6 + l7); keys 0-3, then 4-7.
  const __m512 s03 = _mm512_add_ps(_mm512_permutex2var_ps(a[0], even, a[1]),
                                   _mm512_permutex2var_ps(a[0], odd, a[1]));
  const __m512 s47 = _mm512_add_ps(_mm512_permutex2var_ps(a[2], even, a[3]),
                                   _mm512_permutex2var_ps(a[2], odd, a[3]));
  // Per key: quads (l0..l3, l4..l7); keys 0-7.
  const __m512 quads =
      _mm512_add_ps(_mm512_permutex2var_ps(s03, even, s47), _mm512_permutex2var_ps(s03, odd, s47));
  return low_half(_mm512_add_ps(_mm512_maskz_permutexvar_ps(kAll, even, quads),
                                _mm512_maskz_permutexvar_ps(kAll, odd, quads)));
}

// q_h . k_i for G heads x 8 keys (k + i * stride): avx2::group_dot4's accumulators and tree per
// (head, key), two keys per vector. G = 3: 12 accumulators, 3 query vectors, 4 scales.
template <int G, typename Elem>
EMBER_AVX512_INLINE void group_dot8(const float* q, int64_t hd, const Elem* k, int64_t stride,
                                    __m256 (&out)[G]) {
  __m512 a[G][4];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) a[h][p] = _mm512_setzero_ps();
  }
  if constexpr (kQuantizedKvRow<Elem>) {
    for (int64_t blk = 0; blk < hd / kQuantBlock; ++blk) {
      __m512 scale[4];
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        scale[p] = pair_scale(k[2 * p * stride + blk], k[(2 * p + 1) * stride + blk]);
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512 qv[G];
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) {
          qv[h] = _mm512_maskz_broadcast_f32x8(
              kAll, _mm256_loadu_ps(q + h * hd + blk * kQuantBlock + 8 * c));
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          const __m512 kv =
              pair_chunk(k[2 * p * stride + blk], k[(2 * p + 1) * stride + blk], scale[p], c);
#pragma GCC unroll 4
          for (int h = 0; h < G; ++h) a[h][p] = _mm512_fmadd_ps(qv[h], kv, a[h][p]);
        }
      }
    }
  } else {
    for (int64_t d = 0; d < hd; d += 8) {
      __m512 qv[G];
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h)
        qv[h] = _mm512_maskz_broadcast_f32x8(kAll, _mm256_loadu_ps(q + h * hd + d));
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m512 kv = load_pair8(k + 2 * p * stride, k + (2 * p + 1) * stride, d);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) a[h][p] = _mm512_fmadd_ps(qv[h], kv, a[h][p]);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) out[h] = reduce_key_pairs(a[h]);
}

// avx2::group_step_scores: keys 8 at a time here, then 4 and 1 as there (a key's bits depend only
// on whether it falls in a group of 4 within its block, which is the same either way).
template <int G, typename Elem>
EMBER_AVX512_INLINE void group_step_scores(const float* q, const Elem* const* blocks, int64_t bs,
                                           int64_t n, int64_t row_stride, int64_t hd, float scale,
                                           int64_t n_pad, float* s, int64_t s_stride) {
  const __m256 scale8 = _mm256_set1_ps(scale);
  const __m128 scale4 = _mm_set1_ps(scale);
  for (int64_t b = 0; b * bs < n; ++b) {
    const Elem* kb = blocks[b];
    const int64_t nb = std::min(bs, n - b * bs);
    float* sb = s + b * bs;
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
      __m256 d8[G];
      group_dot8<G>(q, hd, kb + i * row_stride, row_stride, d8);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h)
        _mm256_storeu_ps(sb + h * s_stride + i, _mm256_mul_ps(d8[h], scale8));
    }
    for (; i + 4 <= nb; i += 4) {
      __m128 d4[G];
      avx2::group_dot4<G>(q, hd, kb + i * row_stride, row_stride, d4);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) _mm_storeu_ps(sb + h * s_stride + i, _mm_mul_ps(d4[h], scale4));
    }
    for (; i < nb; ++i) {
      for (int h = 0; h < G; ++h) {
        sb[h * s_stride + i] = avx2::dot_row(q + h * hd, kb + i * row_stride, hd) * scale;
      }
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t i = n; i < n_pad; ++i) s[h * s_stride + i] = -INFINITY;
  }
}

// avx2::channel_step_scores on 512-bit vectors (the same bits): sealed blocks 16 keys at a time,
// the tokens' own block (last, where exact_stride != 0) from its exact f16 rows.
template <int G>
EMBER_AVX512_INLINE void channel_step_scores(const float* q, const uint8_t* const* blocks,
                                             int64_t bs, int64_t n, int64_t exact_stride,
                                             int64_t hd, float scale, int64_t n_pad, float* s,
                                             int64_t s_stride) {
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
    const uint8_t* codes = kv_channel_codes(blocks[b], hd);
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16) channel_scores16<G>(cq, codes, bs, i, hd, scale, sb, s_stride);
    for (; i + 8 <= nb; i += 8) channel_scores8<G>(cq, codes, bs, i, hd, scale, sb, s_stride);
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

// The online-softmax update of avx2's token_step for one head: m' = max(m, max s), s = exp(s - m'),
// l = c l + sum s, acc *= c with c = exp(m - m'). The sum takes the 8-value chunks in order.
EMBER_AVX512_INLINE void softmax_update(float* s, int64_t step_pad, float* m, float* l, float* acc,
                                        int64_t hd_pad) {
  int64_t i = 0;
  __m512 vmax16 = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= step_pad; i += 16)
    vmax16 = _mm512_maskz_max_ps(kAll, vmax16, _mm512_loadu_ps(s + i));
  __m256 vmax = _mm256_max_ps(low_half(vmax16), high_half(vmax16));
  if (i < step_pad) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + i));
  const float m_new = std::max(*m, avx2::hmax(vmax));
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i + 16 <= step_pad; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), _mm512_set1_ps(m_new)));
    _mm512_storeu_ps(s + i, e);
    sum = _mm256_add_ps(_mm256_add_ps(sum, low_half(e)), high_half(e));
  }
  if (i < step_pad) {
    const __m256 e = avx2::exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), _mm256_set1_ps(m_new)));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  const float c = _mm256_cvtss_f32(avx2::exp(_mm256_set1_ps(*m - m_new)));
  *l = *l * c + avx2::hsum(sum);
  *m = m_new;
  int64_t d = 0;
  for (; d + 16 <= hd_pad; d += 16) {
    _mm512_storeu_ps(acc + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), _mm512_set1_ps(c)));
  }
  if (d < hd_pad) {
    _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), _mm256_set1_ps(c)));
  }
}

// 16 values of a V row at element d (d % 16 == 0) as f32, as avx2::load_kv8 gives each 8.
template <typename Elem>
EMBER_AVX512_INLINE __m512 load_kv16(const Elem* row, int64_t d) {
  if constexpr (std::is_same_v<Elem, float>) {
    return _mm512_loadu_ps(row + d);
  } else {
    static_assert(sizeof(Elem) == 2, "f16 or bf16 rows");
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d));
    if constexpr (std::is_same_v<Elem, uint16_t>) return _mm512_maskz_cvtph_ps(kAll, h);
    return widen_bf16(h);
  }
}

// A q8_0 / q4_0 block's 32 values as f32 (lo: values 0-15, hi: 16-31), as kv_block_chunk gives
// them: quant times scale. q4_0 looks its 16 possible products up (vpermps reads an index's low 4
// bits, so a byte's low nibble needs no mask).
template <typename Block>
EMBER_AVX512_INLINE void load_block32(const Block& b, __m512& lo, __m512& hi) {
  const __m512 scale = _mm512_maskz_cvtph_ps(kAll, _mm256_set1_epi16(static_cast<int16_t>(b.d)));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    const __m128i bytes_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16));
    lo = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, bytes)),
                       scale);
    hi = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, bytes_hi)),
                       scale);
  } else {
    const __m512 values = _mm512_mul_ps(
        _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7), scale);
    const __m512i idx = _mm512_maskz_cvtepu8_epi32(kAll, bytes);
    lo = _mm512_maskz_permutexvar_ps(kAll, idx, values);
    hi = _mm512_maskz_permutexvar_ps(kAll, _mm512_maskz_srli_epi32(kAll, idx, 4), values);
  }
}

// acc_h[d, d + 16 NZ) += sum_i p_h[i] * v_i[d, d + 16 NZ) for the G heads over n rows: the order
// of avx2::group_pv_chunk per value. Quantized rows: NZ even and d % 32 == 0 (whole blocks).
// G = 3, NZ = 4: 12 accumulators, 3 broadcasts, 2 value vectors.
template <int G, int NZ, typename Elem>
EMBER_AVX512_INLINE void group_pv_chunk(float* acc, int64_t acc_stride, const float* p,
                                        int64_t p_stride, const Elem* v, int64_t stride, int64_t n,
                                        int64_t d) {
  __m512 a[G][NZ];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < NZ; ++c) a[h][c] = _mm512_loadu_ps(acc + h * acc_stride + d + 16 * c);
  }
  for (int64_t i = 0; i < n; ++i) {
    __m512 pb[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) pb[h] = _mm512_set1_ps(p[h * p_stride + i]);
    const Elem* vi = v + i * stride;
    if constexpr (kQuantizedKvRow<Elem>) {
      static_assert(NZ % 2 == 0, "whole blocks");
#pragma GCC unroll 2
      for (int c = 0; c < NZ; c += 2) {
        __m512 lo, hi;
        load_block32(vi[(d + 16 * c) / kQuantBlock], lo, hi);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) {
          a[h][c] = _mm512_fmadd_ps(pb[h], lo, a[h][c]);
          a[h][c + 1] = _mm512_fmadd_ps(pb[h], hi, a[h][c + 1]);
        }
      }
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < NZ; ++c) {
        const __m512 vv = load_kv16(vi, d + 16 * c);
#pragma GCC unroll 4
        for (int h = 0; h < G; ++h) a[h][c] = _mm512_fmadd_ps(pb[h], vv, a[h][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < NZ; ++c) _mm512_storeu_ps(acc + h * acc_stride + d + 16 * c, a[h][c]);
  }
}

template <int G, typename Elem>
EMBER_AVX512_INLINE void group_pv(float* acc, int64_t acc_stride, const float* p, int64_t p_stride,
                                  const Elem* v, int64_t stride, int64_t n, int64_t hd) {
  int64_t d = 0;
  for (; d + 64 <= hd; d += 64)
    avx512::group_pv_chunk<G, 4>(acc, acc_stride, p, p_stride, v, stride, n, d);
  if constexpr (kQuantizedKvRow<Elem>) {
    if (d < hd)
      avx512::group_pv_chunk<G, 2>(acc, acc_stride, p, p_stride, v, stride, n, d);  // 32 left
  } else {
    switch ((hd - d) / 16) {
      case 3:
        avx512::group_pv_chunk<G, 3>(acc, acc_stride, p, p_stride, v, stride, n, d);
        break;
      case 2:
        avx512::group_pv_chunk<G, 2>(acc, acc_stride, p, p_stride, v, stride, n, d);
        break;
      case 1:
        avx512::group_pv_chunk<G, 1>(acc, acc_stride, p, p_stride, v, stride, n, d);
        break;
      default:
        break;
    }
    d += (hd - d) / 16 * 16;
    if (d < hd) avx2::group_pv_chunk<G, 1>(acc, acc_stride, p, p_stride, v, stride, n, d);
  }
}

// A step's scores and the online-softmax update of its G heads (token_step's first part).
template <int G, typename KElem>
EMBER_AVX512_INLINE void step_softmax(const float* qg, const BlockQ8Act* qq, const KElem* const* kb,
                                      int64_t bs, int64_t n, int64_t k_stride, int64_t hd,
                                      int64_t hd_pad, float scale, const StepRule& rule,
                                      int64_t step_pad, float* scores, float* acc, float* m,
                                      float* l) {
  if constexpr (std::is_same_v<KElem, BlockQ8_0>) {
    q8_step_scores<G>(qq, kb, bs, n, k_stride, hd, scale, step_pad, scores, step_pad);
  } else if constexpr (std::is_same_v<KElem, ChannelKRegion>) {
    channel_step_scores<G>(qg, reinterpret_cast<const uint8_t* const*>(kb), bs, n, k_stride, hd,
                           scale, step_pad, scores, step_pad);
  } else {
    avx512::group_step_scores<G>(qg, kb, bs, n, k_stride, hd, scale, step_pad, scores, step_pad);
  }
  if (rule.active()) {
    for (int64_t j = 0; j < G; ++j) apply_step_rule(scores + j * step_pad, n, rule);
  }
  for (int64_t j = 0; j < G; ++j) {
    softmax_update(scores + j * step_pad, step_pad, m + j, l + j, acc + j * hd_pad, hd_pad);
  }
}

}  // namespace

template <int G, typename KElem, typename VElem>
EMBER_AVX512 void token_step(const float* qg, const BlockQ8Act* qq, const KElem* const* kb,
                             const VElem* const* vb, int64_t bs, int64_t n, int64_t k_stride,
                             int64_t v_stride, int64_t hd, int64_t hd_pad, float scale,
                             const StepRule& rule, int64_t step_pad, float* scores, float* acc,
                             float* m, float* l, StepPhase phase) {
  if (phase != StepPhase::Pv) {
    step_softmax<G>(qg, qq, kb, bs, n, k_stride, hd, hd_pad, scale, rule, step_pad, scores, acc, m,
                    l);
  }
  if (phase == StepPhase::Softmax) return;
  if constexpr (std::is_same_v<VElem, BlockQ8_0> || std::is_same_v<VElem, BlockQ4_0>) {
    group_pv_q8<G>(acc, hd_pad, scores, step_pad, vb, bs, n, v_stride, hd);
  } else {
    for (int64_t b = 0; b * bs < n; ++b) {
      avx512::group_pv<G>(acc, hd_pad, scores + b * bs, step_pad, vb[b], v_stride,
                          std::min(bs, n - b * bs), hd);
    }
  }
}

#define EMBER_TOKEN_STEP(G, K, V)                                                                 \
  template void token_step<G, K, V>(const float*, const BlockQ8Act*, const K* const*,             \
                                    const V* const*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                    int64_t, float, const StepRule&, int64_t, float*, float*,     \
                                    float*, float*, StepPhase);
#define EMBER_TOKEN_STEPS(K, V) \
  EMBER_TOKEN_STEP(1, K, V)     \
  EMBER_TOKEN_STEP(2, K, V)     \
  EMBER_TOKEN_STEP(3, K, V)     \
  EMBER_TOKEN_STEP(4, K, V)
EMBER_TOKEN_STEPS(float, float)
EMBER_TOKEN_STEPS(uint16_t, uint16_t)
EMBER_TOKEN_STEPS(Bf16, Bf16)
EMBER_TOKEN_STEPS(BlockQ8_0, BlockQ8_0)
EMBER_TOKEN_STEPS(BlockQ8_0, float)
EMBER_TOKEN_STEPS(BlockQ4_0, BlockQ4_0)
EMBER_TOKEN_STEPS(float, BlockQ4_0)
EMBER_TOKEN_STEPS(BlockQ8_0, BlockQ4_0)
EMBER_TOKEN_STEPS(ChannelKRegion, BlockQ4_0)
EMBER_TOKEN_STEPS(ChannelKRegion, float)
#undef EMBER_TOKEN_STEPS
#undef EMBER_TOKEN_STEP

}  // namespace ember::cpu::avx512
