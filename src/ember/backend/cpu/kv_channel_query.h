// Scores against a sealed per-channel q4_0 K block (kv_channel_blocks.h) are integer dot products.
// A key's value in channel c is s_c code_c + m_c (the block's f16 scale and minimum), so
//   q . k = sum_c (q_c s_c) code_c + sum_c q_c m_c.
// Per (query head, block) the folded query q'_c = q_c * s_c (f32) is rounded to 15-bit integers
// against its largest magnitude A: qi_c = round-to-even(q'_c * (16383 / A)), a = A / 16383, and
// split into two signed bytes qi = 128 hi + lo (hi = qi >> 7, lo = qi & 127), so that vpdpbusd
// (unsigned codes times signed bytes) sums hi . code and lo . code exactly in int32:
// I = 128 I_hi + I_lo = sum_c qi_c code_c. The bias b = sum_c q_c m_c is summed in a fixed order:
// channel c into lane c % 16 by fma in c order (from 0), lanes t and t + 8 added, then
// avx2::hsum's tree over the 8 lanes. Per key:
//   s = fma(float(I), a, b) * scale.
// Every kernel (AVX2, AVX-512, scalar; one token, a tile of a prefill or a verifying step, a
// segment) computes these bits, so a token's scores do not depend on the path; the reference
// backend models the same rounding of q' (in double past it).
//
// Why: widening each key's 4-bit codes to f32 (fma(scale, code, min)) and reducing 8-lane FMA sums
// per key left a q4_0 cache decoding no faster than an f16 one. Why 15 bits and not q8_0's 8: K's
// outlier channels, the reason for per-channel scales, have scales 10-100x the others', so they
// dominate q' and 8 bits leave the other channels few levels: on blocks with channels 100x the
// others the scores' added error was 0.38 of K's own 4-bit rounding error (rms) with 8 bits, 0.003
// with 15 (kv_channel_query_test.cpp). The second byte costs one vpdpbusd per word.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ember/backend/kv_channel_blocks.h"
#include "ember/core/half.h"

namespace ember::cpu {

// Levels of |qi| (15 bits, so that 128 hi stays within a signed byte's range).
inline constexpr float kChannelQueryLevels = 16383.0f;
// The largest head_dim the folded query's buffers hold (kv_channel_problem refuses more).
inline constexpr int64_t kChannelMaxHeadDim = 512;

// One query head folded into one sealed block.
struct ChannelQuery {
  alignas(64) int8_t hi[kChannelMaxHeadDim];  // qi >> 7, by channel
  alignas(64) int8_t lo[kChannelMaxHeadDim];  // qi & 127, by channel
  float a = 0.0f;                             // the value of one step of qi
  float bias = 0.0f;                          // sum_c q_c m_c
};

// qi as the kernels compute it from q' * (16383 / A): cvtps2dq rounds to nearest even; out of range
// (a NaN query) it gives INT32_MIN, which the kernels' byte packing saturates.
inline int32_t channel_query_level(float x) {
  const long r = std::lrint(x);  // the default rounding mode: to nearest even
  return static_cast<int32_t>(std::clamp<long>(r, -16384, 16383));
}

// The bias's order (above) over q [hd] and the block's minimums (f16).
inline float channel_query_bias(const float* q, const uint16_t* min, int64_t hd) {
  float lanes[16] = {};
  for (int64_t c = 0; c < hd; ++c)
    lanes[c % 16] = std::fma(q[c], f16_to_f32(min[c]), lanes[c % 16]);
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = lanes[i] + lanes[i + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

// The rule's fold in scalar code (the kernels' bits): q [hd] against a sealed region.
inline void fold_channel_query(const float* q, const uint8_t* region, int64_t hd,
                               ChannelQuery& out) {
  const auto* scale = reinterpret_cast<const uint16_t*>(region);
  float folded[kChannelMaxHeadDim];
  float A = 0.0f;
  for (int64_t c = 0; c < hd; ++c) {
    folded[c] = q[c] * f16_to_f32(scale[c]);
    A = std::max(A, std::fabs(folded[c]));
  }
  const float inv = A > 0.0f ? kChannelQueryLevels / A : 0.0f;
  out.a = A / kChannelQueryLevels;
  for (int64_t c = 0; c < hd; ++c) {
    const int32_t qi = channel_query_level(folded[c] * inv);
    out.hi[c] = static_cast<int8_t>(qi >> 7);
    out.lo[c] = static_cast<int8_t>(qi & 127);
  }
  out.bias = channel_query_bias(q, scale + hd, hd);
}

// sum_c qi_c code_c of row `slot`, exact.
inline int32_t channel_key_dot(const ChannelQuery& cq, const uint8_t* region, int64_t slot,
                               int64_t hd, int64_t block_size) {
  int32_t hi = 0, lo = 0;
  for (int64_t c = 0; c < hd; ++c) {
    const int code = kv_channel_code(region, slot, c, hd, block_size);
    hi += cq.hi[c] * code;
    lo += cq.lo[c] * code;
  }
  return hi * 128 + lo;
}

// One key's score by the rule, in scalar code: the kernels' bits.
inline float channel_key_score(const ChannelQuery& cq, const uint8_t* region, int64_t slot,
                               int64_t hd, int64_t block_size, float scale) {
  const auto dot = static_cast<float>(channel_key_dot(cq, region, slot, hd, block_size));
  return std::fma(dot, cq.a, cq.bias) * scale;
}

}  // namespace ember::cpu
