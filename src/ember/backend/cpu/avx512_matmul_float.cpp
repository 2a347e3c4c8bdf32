// AVX-512 f32 / f16 matmul for fewer than kGemmMinTokens tokens (decode, small batches): one row at
// a time against every token, so the weights stream in address order (see avx512_matmul_bf16.cpp
// for why: several rows side by side are several streams the hardware prefetchers follow badly).
// From kGemmMinTokens tokens on the AVX2 tokens-in-lanes GEMM runs (avx512_kernels.cpp).
//
// Determinism: per (row, token) two accumulators (even and odd 16-value chunks, each in order of
// k), added and reduced in one fixed order: the same bits for any T < 16, row range or thread.
// Against the AVX2 decode kernel (one accumulator per output) it differs by float reassociation.
#include <algorithm>

#include "ember/backend/cpu/avx512_matmul_float.h"
#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu::avx512 {
namespace {

// 16 values of a row from element k as f32; `mask` selects the ones below K (zeros elsewhere).
template <DType kDtype>
EMBER_AVX512_INLINE __m512 load16(const uint8_t* row, int64_t k, __mmask16 mask) {
  if constexpr (kDtype == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else {
    // The zero-masked conversion: GCC 12's plain one reads an "undefined" vector and warns.
    return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xffff),
                                 _mm256_maskz_loadu_epi16(mask, row + 2 * k));
  }
}

// kPrefetch: ask for the bytes one iteration reads, kDecodePrefetchBytes on, into L2 (Intel:
// decode_stream_prefetch in avx512_util.h; rows are contiguous, a prefetch past the matrix is
// dropped, never a fault).
template <DType kDtype, int NT, bool kPrefetch>
EMBER_AVX512 void gemv_row(const float* x, int64_t K, const uint8_t* row, float* y, int64_t ldy) {
  __m512 acc[NT][2];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  const auto all = static_cast<__mmask16>(0xffff);
  int64_t k = 0;
  constexpr int64_t kElementBytes = kDtype == DType::F32 ? 4 : 2;
  for (; k + 32 <= K; k += 32) {
    if constexpr (kPrefetch) {
      const auto* ahead =
          reinterpret_cast<const char*>(row + kElementBytes * k) + kDecodePrefetchBytes;
      _mm_prefetch(ahead, _MM_HINT_T1);
      if constexpr (kElementBytes == 4) _mm_prefetch(ahead + 64, _MM_HINT_T1);
    }
    const __m512 w0 = load16<kDtype>(row, k, all);
    const __m512 w1 = load16<kDtype>(row, k + 16, all);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + t * K + k;
      acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt), acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt + 16), acc[t][1]);
    }
  }
  if (k < K) {  // one or two chunks of 16 left, the last one partial: masked on both sides
    const __mmask16 m0 = lanes16(K - k), m1 = lanes16(K - k - 16);
    const __m512 w0 = load16<kDtype>(row, k, m0);
    const __m512 w1 = load16<kDtype>(row, k + 16, m1);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + t * K + k;
      acc[t][0] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, xt), acc[t][0]);
      if (K - k > 16) {
        acc[t][1] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, xt + 16), acc[t][1]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) y[t * ldy] = reduce_add(_mm512_add_ps(acc[t][0], acc[t][1]));
}

template <DType kDtype, bool kPrefetch>
EMBER_AVX512 void gemv_rows(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                            int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols, rb = w.row_bytes;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = row_begin; n < row_end; ++n) {
    const uint8_t* row = base + n * rb;
    for (int64_t t = 0; t < T; t += 4) {
      const float* xt = x + t * K;
      float* yt = y + t * ldy + n;
      switch (std::min<int64_t>(4, T - t)) {
        case 1:
          gemv_row<kDtype, 1, kPrefetch>(xt, K, row, yt, ldy);
          break;
        case 2:
          gemv_row<kDtype, 2, kPrefetch>(xt, K, row, yt, ldy);
          break;
        case 3:
          gemv_row<kDtype, 3, kPrefetch>(xt, K, row, yt, ldy);
          break;
        default:
          gemv_row<kDtype, 4, kPrefetch>(xt, K, row, yt, ldy);
          break;
      }
    }
  }
}

}  // namespace

void float_gemv(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end) {
  const bool ahead = decode_stream_prefetch();
  if (w.dtype == DType::F32) {
    if (ahead) return gemv_rows<DType::F32, true>(x, T, w, y, ldy, row_begin, row_end);
    return gemv_rows<DType::F32, false>(x, T, w, y, ldy, row_begin, row_end);
  }
  if (ahead) return gemv_rows<DType::F16, true>(x, T, w, y, ldy, row_begin, row_end);
  gemv_rows<DType::F16, false>(x, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx512
