// bf16 decode (T < 16) through f32 FMAs, for the CPUs whose vdpbf16ps does half the flops a cycle
// of their FMAs (Intel: bf16_prefill_uses_fma). A decode step of one token streams the weights and
// either instruction keeps up with memory; a speculative verifying step or a small batch (2 to 15
// tokens) multiplies each weight several times, and there vdpbf16ps (one zmm every two cycles on a
// Xeon of the Sapphire Rapids family) was the limit: 6 tokens took 3.2x one token's time on a
// 576 x 1,536 matrix.
//
// The same numbers as the vdpbf16ps decode kernel (avx512_matmul_bf16.cpp), bit for bit: the
// activations are rounded to bf16 once, here stored widened back to f32, each 32-value chunk as
// its 16 even values then its 16 odd ones ([T][K32] floats, zeros past K), so that a chunk of
// weights widens once (one shift, one and) for every token. Per lane the FMAs take the odd product
// before the even one, as vdpbf16ps adds them (Intel documents both additions rounded, the products
// of two bf16 values exact in f32), into the same two accumulators per (row, token), reduced in the
// same order. (vdpbf16ps also treats denormal inputs and results as zero; FMAs keep them. Nothing a
// model computes lands there.)
#include <algorithm>

#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu::avx512 {
namespace {

constexpr auto kAll = static_cast<__mmask16>(0xffff);

// K rounded up to 32: floats per token of the widened activations.
int64_t k32(int64_t K) {
  return (K + 31) / 32 * 32;
}

// A 32-bit lane's bf16 pair as f32: the even value (low half) and the odd one (high half).
EMBER_AVX512_INLINE __m512 even_values(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, pairs, 16));
}
EMBER_AVX512_INLINE __m512 odd_values(__m512i pairs) {
  return _mm512_castsi512_ps(
      _mm512_maskz_and_epi32(kAll, pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// acc += one 32-value chunk of weights (pairs, 16 lanes) times a token's widened chunk x.
EMBER_AVX512_INLINE __m512 chunk_fma(__m512 acc, __m512 w_even, __m512 w_odd, const float* x) {
  acc = _mm512_fmadd_ps(w_odd, _mm512_loadu_ps(x + 16), acc);
  return _mm512_fmadd_ps(w_even, _mm512_loadu_ps(x), acc);
}

// f.template operator()<N>() for N = n, 1 <= n <= Max: a token count as a compile-time constant.
template <int Max, typename F>
EMBER_AVX512_INLINE void with_token_count(int64_t n, F&& f) {
  if constexpr (Max > 1) {
    if (n < Max) return with_token_count<Max - 1>(n, f);
  }
  f.template operator()<Max>();
}

// Row `row` (K values) against NT tokens (xw: their widened rows, kx floats apart); kPrefetch: as
// avx512_matmul_bf16.cpp's gemv_row.
template <int NT, bool kPrefetch>
EMBER_AVX512 void gemv_row_fma(const float* xw, int64_t kx, int64_t K, const uint8_t* row, float* y,
                               int64_t ldy) {
  __m512 acc[NT][2];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    if constexpr (kPrefetch) {
      const auto* ahead = reinterpret_cast<const char*>(row + 2 * k) + kDecodePrefetchBytes;
      _mm_prefetch(ahead, _MM_HINT_T1);
      _mm_prefetch(ahead + 64, _MM_HINT_T1);
    }
    const __m512i w0 = _mm512_loadu_si512(row + 2 * k);
    const __m512i w1 = _mm512_loadu_si512(row + 2 * k + 64);
    const __m512 e0 = even_values(w0), o0 = odd_values(w0);
    const __m512 e1 = even_values(w1), o1 = odd_values(w1);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const float* x = xw + t * kx + k;
      acc[t][0] = chunk_fma(acc[t][0], e0, o0, x);
      acc[t][1] = chunk_fma(acc[t][1], e1, o1, x + 32);
    }
  }
  if (k < K) {  // one or two chunks of 32 left, the last one partial: masked (zeros past K)
    const __m512i w0 = _mm512_maskz_loadu_epi16(lanes32(K - k), row + 2 * k);
    const __m512i w1 = _mm512_maskz_loadu_epi16(lanes32(K - k - 32), row + 2 * k + 64);
    const __m512 e0 = even_values(w0), o0 = odd_values(w0);
    const __m512 e1 = even_values(w1), o1 = odd_values(w1);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const float* x = xw + t * kx + k;
      acc[t][0] = chunk_fma(acc[t][0], e0, o0, x);
      if (K - k > 32) acc[t][1] = chunk_fma(acc[t][1], e1, o1, x + 32);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) y[t * ldy] = reduce_add(_mm512_add_ps(acc[t][0], acc[t][1]));
}

// Each row against up to 8 tokens per pass (from 9 tokens on, the row's second pass reads it from
// L1). Each (row, token) pair adds two FMAs a chunk to one of its two accumulators, one after the
// other: 4 tokens are 8 chains, what two FMA ports with a latency of 4 keep busy; up to 8 per
// pass keep a verifying step of 5 or 6 tokens in one pass.
template <bool kPrefetch>
EMBER_AVX512 void gemv_rows_fma(const float* xw, int64_t T, const WeightMatrix& w, float* y,
                                int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols, rb = w.row_bytes, kx = k32(K);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = row_begin; n < row_end; ++n) {
    const uint8_t* row = base + n * rb;
    for (int64_t t = 0; t < T; t += 8) {
      const float* x = xw + t * kx;
      float* yt = y + t * ldy + n;
      with_token_count<8>(std::min<int64_t>(8, T - t),
                          [&]<int NT>() { gemv_row_fma<NT, kPrefetch>(x, kx, K, row, yt, ldy); });
    }
  }
}

}  // namespace

int64_t bf16_widened_floats(int64_t T, int64_t K) {
  return T * k32(K);
}

EMBER_AVX512 void bf16_prepare_widened(const float* x, int64_t K, int64_t token_begin,
                                       int64_t token_end, float* xw) {
  const int64_t kx = k32(K);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const float* xt = x + t * K;
    float* out = xw + t * kx;
    for (int64_t k = 0; k < kx; k += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lanes16(K - k), xt + k);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes16(K - k - 16), xt + k + 16);
      // Rounded to bf16 pairs as bf16_prepare rounds them (lo fills the low 16 values).
      const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
      const __m512i pairs = reinterpret_cast<const __m512i&>(v);
      _mm512_storeu_ps(out + k, even_values(pairs));
      _mm512_storeu_ps(out + k + 16, odd_values(pairs));
    }
  }
}

EMBER_AVX512 void bf16_gemv_fma(const float* xw, int64_t T, const WeightMatrix& w, float* y,
                                int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (decode_stream_prefetch()) return gemv_rows_fma<true>(xw, T, w, y, ldy, row_begin, row_end);
  gemv_rows_fma<false>(xw, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx512
