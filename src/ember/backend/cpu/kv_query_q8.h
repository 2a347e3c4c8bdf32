// Scores against a q8_0 K cache stored in groups of 32 (kv_row_format.h) are integer dot products,
// as llama.cpp's CPU attention computes them: the query is rounded to q8_0 blocks too, exactly as
// the activations of quantized matmuls are (quantize_activations: d = max|q| / 127, q8 = q / d
// rounded to nearest even, on every ISA the same bits), and
//   q . k = sum over groups g of (dq_g * dk_g) * I_g,   I_g = sum of q8 * k8 over the group,
// each I_g exact in int32. The float part is fixed, so every kernel gives the same bits: per key,
// w_g = dq_g * dk_g (one rounding), s = I_0 * w_0, then s = fma(I_g, w_g, s) for g = 1, 2, ...
// in order, then s * scale. The cpu backend's kernels (each ISA, one token or a tile, a segment
// or the whole context) and the reference backend all score this way, so the reference models
// what the cpu backend computes.
//
// Why: widening int8 keys to f32 and reducing each key's 8-lane FMA sums cost more instructions
// per key than the halved bytes save, so a q8_0 cache decoded no faster than an f16 one (README,
// KV cache). The rounding of q adds at most half a step of max|q_g| / 127 per value, the same
// order as K's own rounding in the cache.
#pragma once

#include <cmath>
#include <cstdint>

#include "ember/backend/cpu/kernels.h"
#include "ember/core/half.h"

namespace ember::cpu {

// Whether a K cache of this dtype and head_dim is scored by integer dot products: q8_0 in groups
// of 32, not per channel.
inline bool kv_scores_in_int8(DType k_dtype, int64_t head_dim, bool k_channel) {
  return k_dtype == DType::Q8_0 && !k_channel && head_dim % kQuantBlock == 0;
}

// The rows of keys [i0, i0 + N) of a softmax step (blocks of bs rows, row_stride blocks apart) for
// the kernels that score N keys at a time; past the step's n keys the last one repeats (its
// lanes are computed and dropped).
template <int N>
inline void step_key_rows(const BlockQ8_0* const* blocks, int64_t bs, int64_t row_stride,
                          int64_t i0, int64_t n, const BlockQ8_0* (&rows)[N]) {
  int64_t b = i0 / bs, r = i0 % bs;
  for (int64_t j = 0; j < N; ++j) {
    rows[j] = blocks[b] + r * row_stride;
    if (i0 + j + 1 < n && ++r == bs) {
      r = 0;
      ++b;
    }
  }
}

// One key's score by the rule above, in scalar code: q = the query head's hd / 32 blocks, row =
// the key's. The kernels' bits.
inline float q8_key_score(const BlockQ8Act* q, const BlockQ8_0* row, int64_t hd, float scale) {
  float s = 0.0f;
  for (int64_t g = 0; g < hd / kQuantBlock; ++g) {
    int32_t dot = 0;
    for (int i = 0; i < kQuantBlock; ++i) dot += int32_t{q[g].qs[i]} * int32_t{row[g].qs[i]};
    const float w = q[g].d * f16_to_f32(row[g].d);
    const auto x = static_cast<float>(dot);
    s = g == 0 ? x * w : std::fma(x, w, s);
  }
  return s * scale;
}

}  // namespace ember::cpu
