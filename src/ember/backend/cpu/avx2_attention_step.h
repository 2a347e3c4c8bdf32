// One online-softmax step of one query token's grouped heads on AVX2 (avx2_attention.cpp walks the
// blocks and calls it; avx512_attention_step.cpp computes the same bits on 512-bit vectors): the
// step's scores, the softmax update, then P V, whole or as its two phases (StepPhase).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/backend/cpu/attention_step.h"
#include "ember/backend/cpu/avx2_attention_group.h"
#include "ember/backend/cpu/avx2_attention_head.h"
#include "ember/backend/cpu/avx2_channel_scores.h"
#include "ember/backend/cpu/avx2_kv_rows.h"
#include "ember/backend/cpu/avx2_q8_scores.h"
#include "ember/backend/cpu/avx2_util.h"

namespace ember::cpu::avx2 {

// token_step's scores and online-softmax update (its first part; see StepPhase).
template <int G, typename KElem>
EMBER_AVX2_INLINE void step_softmax(const float* qg, const BlockQ8Act* qq, const KElem* const* kb,
                                    int64_t group, int64_t bs, int64_t n, int64_t k_stride,
                                    int64_t hd, int64_t hd_pad, __m256i hd_mask, float scale,
                                    const StepRule& rule, int64_t step_pad, float* scores,
                                    float* acc, float* m, float* l) {
  if constexpr (G > 0 && std::is_same_v<KElem, BlockQ8_0>) {
    q8_step_scores<G>(qq, kb, bs, n, k_stride, hd, scale, step_pad, scores, step_pad);
  } else if constexpr (G > 0 && std::is_same_v<KElem, ChannelKRegion>) {
    channel_step_scores<G>(qg, reinterpret_cast<const uint8_t* const*>(kb), bs, n, k_stride, hd,
                           scale, step_pad, scores, step_pad);
  } else if constexpr (G > 0) {
    group_step_scores<G>(qg, kb, bs, n, k_stride, hd, scale, step_pad, scores, step_pad);
  } else {
    static_assert(std::is_same_v<KElem, float>, "the per-head path reads f32 rows");
    for (int64_t j = 0; j < group; ++j) {
      step_scores(qg + j * hd, kb, bs, n, k_stride, hd, hd_mask, scale, step_pad,
                  scores + j * step_pad);
    }
  }
  if (rule.active()) {
    for (int64_t j = 0; j < group; ++j) apply_step_rule(scores + j * step_pad, n, rule);
  }
  for (int64_t j = 0; j < group; ++j) {
    float* s = scores + j * step_pad;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < step_pad; i += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + i));
    }
    const float m_new = std::max(m[j], hmax(vmax));
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < step_pad; i += 8) {
      const __m256 e = exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
      _mm256_storeu_ps(s + i, e);
      sum = _mm256_add_ps(sum, e);
    }
    // c = exp(m - m'): 0 on the first step (m = -inf), 1 when the max did not grow.
    const float c = _mm256_cvtss_f32(exp(_mm256_set1_ps(m[j] - m_new)));
    l[j] = l[j] * c + hsum(sum);
    m[j] = m_new;
    float* a = acc + j * hd_pad;
    const __m256 cv = _mm256_set1_ps(c);
    for (int64_t d = 0; d < hd_pad; d += 8) {
      _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), cv));
    }
  }
}

// One softmax step of one token for the `group` query heads of a kv head (qg: their queries, hd
// apart): scores, the online-softmax update of m, l and acc [group, hd_pad], then acc += P V. The
// step's blocks: kb[b] / vb[b], rows k_stride / v_stride apart. G > 0: the grouped kernels
// (group == G, hd % 8 == 0), q8_0 K (BlockQ8_0) scored in integers against qq (the heads' queries
// rounded to q8_0); G == 0: head by head (any group and hd; f32 rows).
template <int G, typename KElem, typename VElem>
EMBER_AVX2_INLINE void token_step(const float* qg, const BlockQ8Act* qq, const KElem* const* kb,
                                  const VElem* const* vb, int64_t group, int64_t bs, int64_t n,
                                  int64_t k_stride, int64_t v_stride, int64_t hd, int64_t hd_pad,
                                  __m256i hd_mask, float scale, const StepRule& rule,
                                  int64_t step_pad, float* scores, float* acc, float* m, float* l,
                                  StepPhase phase = StepPhase::Whole) {
  if (phase != StepPhase::Pv) {
    step_softmax<G>(qg, qq, kb, group, bs, n, k_stride, hd, hd_pad, hd_mask, scale, rule, step_pad,
                    scores, acc, m, l);
  }
  if (phase == StepPhase::Softmax) return;
  // acc[j] += sum_i p[j][i] * v_i, block by block, acc[j] in registers across each block.
  if constexpr (G > 0 && (std::is_same_v<VElem, BlockQ8_0> || std::is_same_v<VElem, BlockQ4_0>)) {
    group_pv_q8<G>(acc, hd_pad, scores, step_pad, vb, bs, n, v_stride, hd);  // kv_pv_q8.h
  } else if constexpr (G > 0) {
    for (int64_t b = 0; b * bs < n; ++b) {
      group_pv<G>(acc, hd_pad, scores + b * bs, step_pad, vb[b], v_stride, std::min(bs, n - b * bs),
                  hd);
    }
  } else {
    for (int64_t j = 0; j < group; ++j) {
      for (int64_t b = 0; b * bs < n; ++b) {
        accumulate_pv_any(acc + j * hd_pad, scores + j * step_pad + b * bs, vb[b], v_stride,
                          std::min(bs, n - b * bs), hd, hd_mask);
      }
    }
  }
}

}  // namespace ember::cpu::avx2
