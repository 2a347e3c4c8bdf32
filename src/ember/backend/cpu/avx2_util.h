// Internal AVX2 helpers shared by the avx2_*.cpp kernels. Every function carries the target
// attribute itself, so the build needs no -march flag; include only from AVX2 translation units
// and call only from functions with the same target (the dispatcher checks CPUID first).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ember/backend/cpu/weight_layout.h"
#include "ember/core/dtype.h"

#define EMBER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EMBER_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
// A lambda inside an EMBER_AVX2 function does not inherit its target: `[&](...) EMBER_AVX2_LAMBDA
// {`.
#define EMBER_AVX2_LAMBDA __attribute__((target("avx2,fma,f16c")))

namespace ember::cpu::avx2 {

// A tile's accumulators to zero (fully unrolled: they must stay in registers).
template <int R, int C>
EMBER_AVX2_INLINE void zero_accumulators(__m256 (&acc)[R][C]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
}

// Sum of the 8 lanes, always in the same order: (lo128 + hi128), then pairs, then the last two.
// Every kernel that promises bit-identical results reduces through this one function.
EMBER_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane sums of four vectors at once, each in the order ((l0 + l1) + (l2 + l3)) + ((l4 + l5) +
// (l6 + l7)): three hadds and one add instead of four hsum()s (the float decode tiles reduce up to
// 12 accumulators per tile: with hsum() that was ~20% of a SmolLM2 row's work).
EMBER_AVX2_INLINE __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// The first min(n, 4) lanes of s to out.
EMBER_AVX2_INLINE void store_sums(__m128 s, float* out, int n) {
  if (n >= 4) {
    _mm_storeu_ps(out, s);
    return;
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, s);
  for (int i = 0; i < n; ++i) out[i] = lanes[i];
}

// y[t * ldy + r] = the lane sum of acc[r][t] in hsum4()'s order, four rows at a time (rows past R
// in a group of four repeat the last row and are not stored).
template <int R, int NT>
EMBER_AVX2_INLINE void store_lane_sums(const __m256 (&acc)[R][NT], float* y, int64_t ldy) {
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 4
    for (int r0 = 0; r0 < R; r0 += 4) {
      const __m128 s =
          hsum4(acc[r0][t], acc[r0 + 1 < R ? r0 + 1 : R - 1][t],
                acc[r0 + 2 < R ? r0 + 2 : R - 1][t], acc[r0 + 3 < R ? r0 + 3 : R - 1][t]);
      store_sums(s, y + t * ldy + r0, R - r0);
    }
  }
}

EMBER_AVX2_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane mask with the first `n` (0..8) lanes set, for masked loads/stores of a row's tail.
EMBER_AVX2_INLINE __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) to about 1 ulp: x = n ln2 + r with |r| <= ln2/2, exp(r) by its degree-7 Taylor polynomial
// (truncation error < 6e-9 relative), times 2^n built in the exponent bits. Results below the
// normal range flush to 0; above it, +inf.
EMBER_AVX2_INLINE __m256 exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 hi = _mm256_set1_ps(88.72283f);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  // n <= 127 keeps 2^n a normal float; near the top r then grows to ln2 (still < 2e-6 error).
  const __m256 n =
      _mm256_min_ps(_mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                    _mm256_set1_ps(127.0f));
  // r = x - n ln2 in two steps (ln2 split hi + lo) so r keeps its low bits.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));  // underflow (and NaN) -> 0
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

// --- Weight loaders: a row's values as f32 vectors --------------------------------------------

// 8 consecutive values starting at element k of a float-type row.
EMBER_AVX2_INLINE __m256 load8_f32(const uint8_t* row, int64_t k) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
}
EMBER_AVX2_INLINE __m256 load8_f16(const uint8_t* row, int64_t k) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
}
// bf16 is the top half of an f32: widen to 32 bits and shift left 16 (exact).
EMBER_AVX2_INLINE __m256 load8_bf16(const uint8_t* row, int64_t k) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The last n (< 8) values of a float-type row from element k, zero-padded to 8 lanes.
EMBER_AVX2_INLINE __m256 load_tail(DType dtype, const uint8_t* row, int64_t k, int64_t n) {
  if (dtype == DType::F32) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + k, tail_mask(n));
  }
  alignas(16) uint16_t buf[8] = {};
  std::memcpy(buf, row + 2 * k, static_cast<size_t>(n) * 2);
  return dtype == DType::F16 ? load8_f16(reinterpret_cast<const uint8_t*>(buf), 0)
                             : load8_bf16(reinterpret_cast<const uint8_t*>(buf), 0);
}

// One quant block as 4 vectors of 8 f32 values (elements 0-7, 8-15, 16-23, 24-31), each exactly
// d * q: d has 11 significant bits and |q| <= 128 needs 8, so the product is exact in f32 and
// equals the dequantized value bit for bit.
// q8_0: q0 holds values 0-15, q1 values 16-31.
EMBER_AVX2_INLINE void dequantize_q8_0(uint16_t d_f16, __m128i q0, __m128i q1, __m256 out[4]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(d_f16));
  out[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0)));
  out[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q0, 8))));
  out[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1)));
  out[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q1, 8))));
}

// q4_0: byte j of `packed` holds value j (low nibble) and value j + 16 (high nibble), both
// offset by 8.
EMBER_AVX2_INLINE void dequantize_q4_0(uint16_t d_f16, __m128i packed, __m256 out[4]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(d_f16));
  const __m128i nib = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(packed, nib), eight);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), nib), eight);
  out[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
  out[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
  out[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
  out[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
}

EMBER_AVX2_INLINE void load_block_q8_0(const BlockQ8_0* b, __m256 out[4]) {
  dequantize_q8_0(b->d, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)),
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16)), out);
}

EMBER_AVX2_INLINE void load_block_q4_0(const BlockQ4_0* b, __m256 out[4]) {
  dequantize_q4_0(b->d, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)), out);
}

// 4 bytes at p as one 32-bit value (any alignment).
EMBER_AVX2_INLINE int32_t load_u32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Row r (0-7) of an Interleaved8 block, dequantized like load_block_*: the row's 4-byte pieces
// gathered back into block order.
EMBER_AVX2_INLINE void load_interleaved_q8_0(const BlockQ8_0x8* b, int r, __m256 out[4]) {
  const __m128i q0 = _mm_setr_epi32(load_u32(b->qs[0][r]), load_u32(b->qs[1][r]),
                                    load_u32(b->qs[2][r]), load_u32(b->qs[3][r]));
  const __m128i q1 = _mm_setr_epi32(load_u32(b->qs[4][r]), load_u32(b->qs[5][r]),
                                    load_u32(b->qs[6][r]), load_u32(b->qs[7][r]));
  dequantize_q8_0(b->d[r], q0, q1, out);
}

EMBER_AVX2_INLINE void load_interleaved_q4_0(const BlockQ4_0x8* b, int r, __m256 out[4]) {
  const __m128i packed = _mm_setr_epi32(load_u32(b->qs[0][r]), load_u32(b->qs[1][r]),
                                        load_u32(b->qs[2][r]), load_u32(b->qs[3][r]));
  dequantize_q4_0(b->d[r], packed, out);
}

}  // namespace ember::cpu::avx2
