// P V against a q8_0 or q4_0 V cache stored in groups of 32 (kv_row_format.h) is an integer sum,
// as the scores against a q8_0 K cache are (kv_query_q8.h). For one softmax step of a query head
// (its keys i = 0..n-1, their weights p_i = exp(s_i - m) in [0, 1]) and one 32-value group c of V
// (scale d_ic, quants v_ic[0..31]: q8_0's bytes, or q4_0's nibbles minus 8):
//   w_i = p_i * d_ic                                  (f32, one rounding)
//   W   = max_i |w_i|;  nothing to add where W < 2^-100 (a step whose every weight is that far
//         below the softmax's max adds nothing a float sum would keep; 32767 / W stays finite)
//   q_i = round_half_even(w_i * (32767 / W))          (0..32767; 32767 / W one f32 division)
//   o   = sum_i q_i * v_ic                            (int32, exact; keys in chunks of 256)
//   acc[32c + j] = fma(float(o[j]), W / 32767, acc)   (once per chunk of keys, W / 32767 in f32)
// The AVX2 and AVX-512 kernels compute this wherever head_dim % 32 == 0 and K and V are both q8_0,
// or V is q4_0 (beside any K: f16, q8_0, q4_0, per-channel q4_0), on every path (one token or a
// tile, a segment or the whole context), so their bits do not depend on the path or the ISA. Not
// under it: the scalar kernels (EMBER_ISA=scalar) and the AMX set's prefill tiles of 16 or more
// tokens, which widen V (to f32, to bf16) as they widen K.
//
// Why: widening each key's int8 values to f32, scaling them and one FMA per value and head was
// half the step's time on a q8_0 cache (16 instructions beside 12 FMAs per key at head_dim 64,
// group 3). As int16 pairs, two keys advance per vpdpwssd (pmaddwd on AVX2), and the widening is
// two byte shuffles per pair of keys (q4_0: a nibble mask, a shift and a subtraction more, shared
// by the group's heads; the AVX-512 kernel takes q4_0's nibbles as stored, 0..15, from two in-lane
// byte shuffles per pair, and takes 8 times the chunk's weight sum off its integer sums: the same
// exact o). The rounding of w adds at most 1 / 65534 of the step's largest weight per
// key: far below V's own rounding to 8 (or 4) bits.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/dtype.h"

namespace ember::cpu {

// The levels the step's largest weight maps to (int16's largest value).
inline constexpr float kPvQ8Levels = 32767.0f;
// Keys summed in int32 before they go to the float accumulator: 256 * 32767 * 128 < 2^31 (q4_0's
// quants are at most 8 in magnitude).
inline constexpr int64_t kPvQ8ChunkKeys = 256;
// Below this largest weight a step's head adds nothing (see W above).
inline constexpr float kPvQ8MinWeight = 0x1p-100f;

// The rule's two scales for a step's largest weight magnitude: *back = W / 32767 (0: the head adds
// nothing) and the factor that maps W to 32767 (0 then too).
inline void pv_q8_scales(float w_max, float* back, float* to_levels) {
  const bool adds = w_max >= kPvQ8MinWeight;
  *back = adds ? w_max / kPvQ8Levels : 0.0f;
  *to_levels = adds ? kPvQ8Levels / w_max : 0.0f;
}

// Per-thread scratch of the integer P V: the step's rows (BlockQ8_0 or BlockQ4_0; past n: the last
// row again, under a weight of 0), the V groups' scales [d_rows][n_pad] and the rounded weights
// [q_rows][n_pad].
template <typename Block>
struct PvIntScratch {
  std::vector<const Block*> rows;
  std::vector<float> d;
  std::vector<int16_t> q;

  // Sized for n keys padded to a multiple of pad (even: an odd n gets its pair); returns the
  // padded key count.
  int64_t reserve(int64_t n, int64_t pad, int64_t q_rows, int64_t d_rows) {
    const int64_t n_pad = (n + pad - 1) / pad * pad;
    if (static_cast<int64_t>(rows.size()) < n_pad) rows.resize(static_cast<size_t>(n_pad));
    if (static_cast<int64_t>(d.size()) < d_rows * n_pad) {
      d.resize(static_cast<size_t>(d_rows * n_pad));
    }
    if (static_cast<int64_t>(q.size()) < q_rows * n_pad) {
      q.resize(static_cast<size_t>(q_rows * n_pad));
    }
    return n_pad;
  }
};

// The rows of a step's n keys (blocks of bs rows, v_stride blocks apart) into rows[0..n_pad),
// the last one repeated past n.
template <typename Block>
inline void pv_q8_step_rows(const Block* const* vb, int64_t bs, int64_t n, int64_t v_stride,
                            int64_t n_pad, const Block** rows) {
  for (int64_t i = 0, b = 0, r = 0; i < n; ++i) {
    rows[i] = vb[b] + r * v_stride;
    if (++r == bs) {
      r = 0;
      ++b;
    }
  }
  for (int64_t i = n; i < n_pad; ++i) rows[i] = rows[n - 1];
}

}  // namespace ember::cpu
