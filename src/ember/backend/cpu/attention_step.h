// Internal to the CPU backend's attention (avx2_attention.cpp drives it): one online-softmax step
// of one query token's grouped heads, and the per-ISA step kernels it may hand a step to.
//
// The AVX-512 steps (avx512_attention_step.cpp) compute exactly what avx2_attention.cpp's grouped
// token_step does, bit for bit: every (head, key) dot product keeps its eight accumulator lanes and
// their reduction tree, the scores' exponentials and sums run in the same order per lane, and P V
// accumulates each output value over the keys in the same order; a q8_0 K cache is scored in
// integers by both (avx2_q8_scores.h, avx512_q8_scores.h: exact sums, then kv_query_q8.h's float
// rule lane by lane). So a model's results do not
// depend on which of the two ran a step (the single-token / query-tile / segment tests hold across
// them), while a 512-bit FMA does the work of two 256-bit ones.
#pragma once

#include <cmath>
#include <cstdint>

#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/core/dtype.h"

namespace ember::cpu {

// Where a step's keys start and what the scores rule adds to scale * (q . k): keys before `first`
// (outside a sliding window) get -inf, and a soft-cap bends the rest (attention_scores.h). A step
// is never entirely before `first` (those are skipped), so every step has a finite score.
struct StepRule {
  int64_t p0 = 0;     // the step's first key position
  int64_t first = 0;  // the first key the token attends to
  float softcap = 0.0f;
  bool active() const { return first > p0 || softcap > 0.0f; }
};

inline void apply_step_rule(float* s, int64_t n, const StepRule& rule) {
  for (int64_t i = 0; i < n; ++i) {
    if (rule.p0 + i < rule.first) {
      s[i] = -INFINITY;
    } else if (rule.softcap > 0.0f) {
      s[i] = rule.softcap * std::tanh(s[i] / rule.softcap);
    }
  }
}

// Which part of a step a call runs. Whole: all of it. Softmax: the scores and the online-softmax
// update of m, l and acc (scores then hold the step's weights); Pv: acc += P V from those weights.
// A query tile whose K and V are widened into scratch rows runs Softmax for all its tokens, then
// Pv for all of them, so that K's rows and then V's stay in L1 through the tokens instead of
// evicting each other (a 128-key step of f16 K and V is 64 KiB of f32 rows). Each token's
// operations and their order are the same either way: the same bits.
enum class StepPhase { Whole, Softmax, Pv };

namespace avx2 {
struct Bf16;  // avx2_kv_rows.h
}  // namespace avx2

// The K "row element" of a step over per-channel q4_0 K (kv_channel_blocks.h): kb[b] points at the
// (block, kv head) region itself, whose bs rows are all present, scored by kv_channel_query.h's
// integer rule; except, where the step's k_stride is not 0, its last block: the tokens' own block,
// kb[b] then its exact f16 rows, k_stride values apart.
struct ChannelKRegion {
  uint8_t byte;
};

namespace avx512 {

// One softmax step of one token for the G query heads of a kv head (qg: their queries, hd apart;
// hd % 8 == 0): the step's scores into scores [G, step_pad], the online-softmax update of m, l and
// acc [G, hd_pad], then acc += P V. The step's n keys lie in blocks of bs rows: K rows at kb[b],
// k_stride elements apart, V rows at vb[b], v_stride apart. Row elements: float, uint16_t (f16),
// avx2::Bf16, BlockQ8_0 / BlockQ4_0 (hd % 32 == 0), or per-channel K (ChannelKRegion, above) with
// BlockQ4_0 or float V. BlockQ8_0 K (with
// BlockQ8_0 or float V) is scored in integers against qq, the G heads' queries rounded to q8_0
// blocks (hd / 32 per head; kv_query_q8.h); other K elements score against qg and ignore qq. Call
// only where the CPU has the AVX-512 set (kernels.cpp).
template <int G, typename KElem, typename VElem>
EMBER_AVX512 void token_step(const float* qg, const BlockQ8Act* qq, const KElem* const* kb,
                             const VElem* const* vb, int64_t bs, int64_t n, int64_t k_stride,
                             int64_t v_stride, int64_t hd, int64_t hd_pad, float scale,
                             const StepRule& rule, int64_t step_pad, float* scores, float* acc,
                             float* m, float* l, StepPhase phase = StepPhase::Whole);

}  // namespace avx512
}  // namespace ember::cpu
