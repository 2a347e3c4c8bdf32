// AVX-512 bf16 matmul with vdpbf16ps (AVX512_BF16): y[t, n] = sum_k x[t, k] * W[n, k].
//
// vdpbf16ps multiplies bf16 pairs and adds both products into an f32 lane, so the activations are
// rounded to bf16 too (round to nearest even, once, in prepare_activations), as llama.cpp does for
// bf16 weights. That is the one numerical difference from the AVX2 and scalar paths, which multiply
// the exact bf16 weights by f32 activations: each product carries a relative error <= 2^-9 from
// the rounded activation, so |y - exact| <= 2^-9 * sum_k |x_k w_k| plus f32 summation error (the
// kernel tests hold the AVX-512 bf16 path to 2^-8 of that sum). In exchange one instruction does
// 32 multiply-adds, where the AVX2 tile widens the weights with two ALU ops per 16 values and then
// needs two FMAs: decode reads the same bytes with a third of the instructions, prefill has twice
// the arithmetic throughput.
//
// On Intel CPUs prefill (T >= 16) takes the same products as f32 FMAs instead, which run there at
// twice vdpbf16ps's rate (avx512_matmul_bf16_fma.cpp); decode stays here.
//
// Prepared activations (bf16 pairs, 32 bits each; K32 = K rounded up to 32, P = K32 / 2 pairs):
//   T < 16:  [T][P]      each token's values in order (a plain bf16 row, zero-padded to K32);
//   T >= 16: [G][P][16]  16 tokens side by side for every pair (token lanes), G = ceil(T / 16).
// Both are stored in the float buffer the forward pass keeps (a pair takes one float's 4 bytes).
//
// Determinism: T < 16 (decode): per (row, token) two accumulators (even and odd 32-value chunks,
// each in order), added and reduced in one fixed order: the same bits for any T < 16, row range or
// thread. T >= 16
// (prefill): one lane per (row, token) over pairs in order: the same bits for any T >= 16. The two
// differ by float reassociation only.
#include <algorithm>
#include <cstring>

#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/core/aligned_vector.h"

namespace ember::cpu::avx512 {
namespace {

constexpr int64_t kGroupTokens = 16;

// bf16 pairs per token: K rounded up to 32, halved.
int64_t pairs_per_token(int64_t K) {
  return (K + 31) / 32 * 16;
}

EMBER_AVX512_INLINE __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// Tokens' f32 rows (ldx apart) -> bf16 rows of P pairs each (ldo uint32 apart), zeros past K.
EMBER_AVX512 void rows_to_bf16(const float* x, int64_t ldx, int64_t T, int64_t K, uint32_t* out,
                               int64_t ldo) {
  const int64_t P = pairs_per_token(K);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    for (int64_t k = 0; k < 2 * P; k += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lanes16(K - k), xt + k);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes16(K - k - 16), xt + k + 16);
      // cvtne2ps: the second operand fills the low 16 bf16 values.
      const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
      _mm512_storeu_si512(out + t * ldo + k / 2, reinterpret_cast<const __m512i&>(v));
    }
  }
}

// --- T < 16: weights stream once, in memory order ------------------------------------------
//
// One row at a time, all its tokens at once, so the weights are read strictly in address order: a
// single sequential stream, which the hardware prefetchers follow at full speed. Tiles of several
// rows side by side (the AVX2 shape: 8 rows, each a stream 2K bytes from the next) confused them:
// one thread over a decode step's matrices (huge pages, AMD Zen 4) read 65-68% of the single-thread
// probe with 8-row tiles and software prefetch, 35-40% with 2 or 4 rows and none, and 90-97% one
// row at a time with no software prefetch (which only got in the way: 60-85%).
//
// Intel's cores are the other way round: the stream prefetches 4 KiB ahead into L2 there
// (decode_stream_prefetch, avx512_util.h).

// Row `row` (K values) against NT tokens: two accumulators per token (even / odd 32-value chunks)
// for the dot-product latency, summed and reduced once per row.
// kPrefetch: ask for the 128 bytes kDecodePrefetchBytes on (in this row or the ones after it: rows
// are contiguous, and a prefetch past the matrix is dropped, never a fault) into L2.
template <int NT, bool kPrefetch>
EMBER_AVX512 void gemv_row(const uint32_t* xp, int64_t P, int64_t K, const uint8_t* row, float* y,
                           int64_t ldy) {
  __m512 acc[NT][2];
#pragma GCC unroll 4
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
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const uint32_t* x = xp + t * P + k / 2;
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], as_bh(w0), as_bh(_mm512_loadu_si512(x)));
      acc[t][1] = _mm512_dpbf16_ps(acc[t][1], as_bh(w1), as_bh(_mm512_loadu_si512(x + 16)));
    }
  }
  if (k < K) {  // one or two chunks of 32 left, the last one partial: masked (zeros past K)
    const __m512i w0 = _mm512_maskz_loadu_epi16(lanes32(K - k), row + 2 * k);
    const __m512i w1 = _mm512_maskz_loadu_epi16(lanes32(K - k - 32), row + 2 * k + 64);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const uint32_t* x = xp + t * P + k / 2;
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], as_bh(w0), as_bh(_mm512_loadu_si512(x)));
      if (K - k > 32) {
        acc[t][1] = _mm512_dpbf16_ps(acc[t][1], as_bh(w1), as_bh(_mm512_loadu_si512(x + 16)));
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) y[t * ldy] = reduce_add(_mm512_add_ps(acc[t][0], acc[t][1]));
}

// T in [1, 16): each row against up to 4 tokens per pass; from 5 tokens on, the row's further
// passes read it from L1.
template <bool kPrefetch>
EMBER_AVX512 void gemv_rows(const uint32_t* xp, int64_t P, int64_t T, const WeightMatrix& w,
                            float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols, rb = w.row_bytes;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = row_begin; n < row_end; ++n) {
    const uint8_t* row = base + n * rb;
    for (int64_t t = 0; t < T; t += 4) {
      const uint32_t* x = xp + t * P;
      float* yt = y + t * ldy + n;
      switch (std::min<int64_t>(4, T - t)) {
        case 1:
          gemv_row<1, kPrefetch>(x, P, K, row, yt, ldy);
          break;
        case 2:
          gemv_row<2, kPrefetch>(x, P, K, row, yt, ldy);
          break;
        case 3:
          gemv_row<3, kPrefetch>(x, P, K, row, yt, ldy);
          break;
        default:
          gemv_row<4, kPrefetch>(x, P, K, row, yt, ldy);
          break;
      }
    }
  }
}

EMBER_AVX512 void gemv(const uint32_t* xp, int64_t P, int64_t T, const WeightMatrix& w, float* y,
                       int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (decode_stream_prefetch()) return gemv_rows<true>(xp, P, T, w, y, ldy, row_begin, row_end);
  gemv_rows<false>(xp, P, T, w, y, ldy, row_begin, row_end);
}

// --- T >= 16: tokens in lanes --------------------------------------------------------------

// Pair j of every token group against pair j of R rows, broadcast. kHalf: the last pair of an odd
// K, whose second weight is not there (taken as 0; its activation is 0 too).
template <int R, int NG, bool kHalf>
EMBER_AVX512_INLINE void gemm_step(const uint32_t* xg, int64_t P, int64_t j, const uint8_t* w,
                                   int64_t row_bytes, __m512 (&acc)[R][NG]) {
  __m512i xv[NG];
#pragma GCC unroll 2
  for (int g = 0; g < NG; ++g) xv[g] = _mm512_loadu_si512(xg + (g * P + j) * kGroupTokens);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    int32_t pair = 0;
    std::memcpy(&pair, w + r * row_bytes + 4 * j, kHalf ? 2 : 4);
    const __m512i wb = _mm512_set1_epi32(pair);
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], as_bh(xv[g]), as_bh(wb));
  }
}

// R rows x NG token groups (16 tokens each) over all K: acc[r][g] lane i += the pair of token
// 16g + i times row r's pair, broadcast. K odd: the last pair's missing weight is taken as 0.
template <int R, int NG>
EMBER_AVX512 void gemm_tile(const uint32_t* xg, int64_t P, int64_t K, const uint8_t* w,
                            int64_t row_bytes, float* y, int64_t ldy, int64_t tokens) {
  __m512 acc[R][NG];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  const int64_t full_pairs = K / 2;
  for (int64_t j = 0; j < full_pairs; ++j) gemm_step<R, NG, false>(xg, P, j, w, row_bytes, acc);
  if (K % 2 != 0) gemm_step<R, NG, true>(xg, P, full_pairs, w, row_bytes, acc);
  alignas(64) float lanes[R][kGroupTokens];
  for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r], acc[r][g]);
    store_token_lanes<R>(&lanes[0][0], std::min<int64_t>(kGroupTokens, tokens - g * kGroupTokens),
                         y + g * kGroupTokens * ldy, ldy);
  }
}

template <int R>
EMBER_AVX512 void gemm_rows(const uint32_t* xg, int64_t P, int64_t T, const WeightMatrix& w,
                            float* y, int64_t ldy, int64_t n) {
  const int64_t K = w.n_cols, rb = w.row_bytes;
  const uint8_t* rows = static_cast<const uint8_t*>(w.data) + n * rb;
  const int64_t G = (T + kGroupTokens - 1) / kGroupTokens;
  int64_t g = 0;
  for (; g + 2 <= G; g += 2) {
    gemm_tile<R, 2>(xg + g * P * kGroupTokens, P, K, rows, rb, y + g * kGroupTokens * ldy + n, ldy,
                    T - g * kGroupTokens);
  }
  if (g < G) {
    gemm_tile<R, 1>(xg + g * P * kGroupTokens, P, K, rows, rb, y + g * kGroupTokens * ldy + n, ldy,
                    T - g * kGroupTokens);
  }
}

// 12-row tiles (24 accumulators for 32 tokens), each through every token group while its rows are
// in L1/L2; the leftover rows in tiles of 8, 4, 2, 1.
EMBER_AVX512 void gemm(const uint32_t* xg, int64_t P, int64_t T, const WeightMatrix& w, float* y,
                       int64_t ldy, int64_t row_begin, int64_t row_end) {
  for_each_row_tile(row_begin, row_end,
                    [&]<int R>(int64_t n) { gemm_rows<R>(xg, P, T, w, y, ldy, n); });
}

}  // namespace

int64_t bf16_prepared_floats(int64_t T, int64_t K) {
  const int64_t P = pairs_per_token(K);
  return T >= kGroupTokens ? (T + kGroupTokens - 1) / kGroupTokens * kGroupTokens * P : T * P;
}

EMBER_AVX512 void bf16_prepare(const float* x, int64_t T, int64_t K, int64_t token_begin,
                               int64_t token_end, float* xp) {
  const int64_t P = pairs_per_token(K);
  auto* out = reinterpret_cast<uint32_t*>(xp);
  if (T < kGroupTokens) {
    rows_to_bf16(x + token_begin * K, K, token_end - token_begin, K, out + token_begin * P, P);
    return;
  }
  // One group at a time: its tokens as bf16 rows, then transposed to [P][16] (zeros for tokens
  // past T).
  thread_local AlignedVector<uint32_t> rows;
  if (static_cast<int64_t>(rows.size()) < kGroupTokens * P) {
    rows.resize(static_cast<size_t>(kGroupTokens * P));
  }
  for (int64_t t0 = token_begin; t0 < token_end; t0 += kGroupTokens) {
    const int64_t n = std::min(kGroupTokens, token_end - t0);
    std::fill(rows.begin(), rows.begin() + kGroupTokens * P, 0u);
    rows_to_bf16(x + t0 * K, K, n, K, rows.data(), P);
    uint32_t* group = out + t0 * P;
    const __m512i token_rows =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(P)));
    for (int64_t j = 0; j < P; ++j) {
      const __m512i col = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), static_cast<__mmask16>(0xffff), token_rows, rows.data() + j, 4);
      _mm512_storeu_si512(group + j * kGroupTokens, col);
    }
  }
}

EMBER_AVX512 void bf16_matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y,
                                       int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end) return;
  const int64_t P = pairs_per_token(w.n_cols);
  const auto* x = reinterpret_cast<const uint32_t*>(xp);
  if (T < kGroupTokens) return gemv(x, P, T, w, y, ldy, row_begin, row_end);
  if (bf16_prefill_uses_fma()) return bf16_gemm_fma(x, P, T, w, y, ldy, row_begin, row_end);
  gemm(x, P, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx512
