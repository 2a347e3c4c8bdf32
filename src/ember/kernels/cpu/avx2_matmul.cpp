// AVX2 matmul y[t, n] = sum_k x[t, k] * W[n, k] for every weight dtype.
//
// Work is cut into tiles of R weight rows x NT tokens. In a tile each weight chunk of 8 values is
// loaded (and converted to f32) once and used for NT tokens, and each activation chunk once for R
// rows. Quantized weights are expanded to f32 per 32-block (d * q, exact), so every dtype computes
// exactly the f32 product on its dequantized weights.
//
// Determinism: every output element has ONE accumulator that takes its 8-lane FMAs in increasing k
// and is reduced by hsum(); the tile shape only decides which elements run side by side, never the
// order within one element. So y[t, n] is bit-identical for any T, row range or thread.
#include <algorithm>

#include "ember/kernels/cpu/avx2_util.h"
#include "ember/kernels/cpu/kernels_isa.h"

namespace ember::cpu::avx2 {
namespace {

// Float weight rows (f32, f16, bf16): chunks of 8 along k, the last chunk zero-padded.
template <DType kDtype>
EMBER_AVX2_INLINE __m256 load8(const uint8_t* row, int64_t k) {
  if constexpr (kDtype == DType::F32) return load8_f32(row, k);
  if constexpr (kDtype == DType::F16) return load8_f16(row, k);
  return load8_bf16(row, k);
}

// x: NT tokens starting at x (leading dim K); w: R rows starting at w (row_bytes apart);
// y: y[t * ldy + r] for the tile.
template <DType kDtype, int R, int NT>
EMBER_AVX2 void tile_float(const float* x, int64_t K, const uint8_t* w, int64_t row_bytes, float* y,
                           int64_t ldy) {
  __m256 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8<kDtype>(w + r * row_bytes, k);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * K + k), acc[r][t]);
      }
    }
  }
  if (k < K) {  // zero-padded tail: the padding lanes add 0 * 0
    const __m256i mask = tail_mask(K - k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load_tail(kDtype, w + r * row_bytes, k, K - k);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + t * K + k, mask), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum(acc[r][t]);
  }
}

// Quantized rows: per 32-block, 4 chunks of 8 exact f32 weights (K is a multiple of 32).
template <DType kDtype, int R, int NT>
EMBER_AVX2 void tile_quant(const float* x, int64_t K, const uint8_t* w, int64_t row_bytes, float* y,
                           int64_t ldy) {
  __m256 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const int64_t n_blocks = K / kQuantBlock;
  for (int64_t b = 0; b < n_blocks; ++b) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 wv[4];
      if constexpr (kDtype == DType::Q8_0) {
        load_block_q8_0(reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes) + b, wv);
      } else {
        load_block_q4_0(reinterpret_cast<const BlockQ4_0*>(w + r * row_bytes) + b, wv);
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const float* xb = x + t * K + b * kQuantBlock;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          acc[r][t] = _mm256_fmadd_ps(wv[c], _mm256_loadu_ps(xb + 8 * c), acc[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum(acc[r][t]);
  }
}

template <DType kDtype, int R, int NT>
EMBER_AVX2_INLINE void tile(const float* x, int64_t K, const uint8_t* w, int64_t row_bytes,
                            float* y, int64_t ldy) {
  if constexpr (kDtype == DType::Q8_0 || kDtype == DType::Q4_0) {  // K % 32 == 0
    tile_quant<kDtype, R, NT>(x, K, w, row_bytes, y, ldy);
  } else {
    tile_float<kDtype, R, NT>(x, K, w, row_bytes, y, ldy);
  }
}

// Prefill tile shape, sized to the 16 ymm registers. Float rows: 4 rows x 3 tokens = 12
// accumulators + 3 activation vectors + 1 weight vector. Quantized rows keep a whole expanded
// block (4 vectors) live per row, so: 2 rows x 4 tokens = 8 accumulators + 4 + 1.
template <DType kDtype>
constexpr bool kIsQuant = kDtype == DType::Q8_0 || kDtype == DType::Q4_0;
template <DType kDtype>
constexpr int kRows = kIsQuant<kDtype> ? 2 : 4;
template <DType kDtype>
constexpr int kTokens = kIsQuant<kDtype> ? 4 : 3;

// Tokens [t, t + nt) (nt in 1..4) against rows [n, n + R).
template <DType kDtype, int R>
EMBER_AVX2_INLINE void tile_tokens(const float* x, int nt, int64_t K, const uint8_t* w,
                                   int64_t row_bytes, float* y, int64_t ldy) {
  if (nt == 1) {
    tile<kDtype, R, 1>(x, K, w, row_bytes, y, ldy);
  } else if (nt == 2) {
    tile<kDtype, R, 2>(x, K, w, row_bytes, y, ldy);
  } else if (nt == 3) {
    tile<kDtype, R, 3>(x, K, w, row_bytes, y, ldy);
  } else {
    tile<kDtype, R, 4>(x, K, w, row_bytes, y, ldy);
  }
}

// Decode (T = 1): 8 rows at a time give 8 independent FMA chains to cover the FMA latency.
// Prefill (T > 1): kRows x kTokens tiles, so each converted weight chunk serves several tokens and
// each activation chunk several rows; the tile's rows (a few KiB) stay in L1 while all token
// groups stream past them.
template <DType kDtype>
EMBER_AVX2 void matmul_dtype(const float* x, int64_t T, const WeightMatrix& w, float* y,
                             int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  int64_t n = row_begin;
  if (T == 1) {
    for (; n + 8 <= row_end; n += 8) tile<kDtype, 8, 1>(x, K, base + n * rb, rb, y + n, ldy);
    for (; n < row_end; ++n) tile<kDtype, 1, 1>(x, K, base + n * rb, rb, y + n, ldy);
    return;
  }
  constexpr int R = kRows<kDtype>, NT = kTokens<kDtype>;
  for (; n + R <= row_end; n += R) {
    for (int64_t t = 0; t < T; t += NT) {
      const int nt = static_cast<int>(std::min<int64_t>(NT, T - t));
      tile_tokens<kDtype, R>(x + t * K, nt, K, base + n * rb, rb, y + t * ldy + n, ldy);
    }
  }
  for (; n < row_end; ++n) {
    for (int64_t t = 0; t < T; t += NT) {
      const int nt = static_cast<int>(std::min<int64_t>(NT, T - t));
      tile_tokens<kDtype, 1>(x + t * K, nt, K, base + n * rb, rb, y + t * ldy + n, ldy);
    }
  }
}

}  // namespace

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  switch (w.dtype) {
    case DType::F32:
      matmul_dtype<DType::F32>(x, T, w, y, ldy, row_begin, row_end);
      break;
    case DType::F16:
      matmul_dtype<DType::F16>(x, T, w, y, ldy, row_begin, row_end);
      break;
    case DType::BF16:
      matmul_dtype<DType::BF16>(x, T, w, y, ldy, row_begin, row_end);
      break;
    case DType::Q8_0:
      matmul_dtype<DType::Q8_0>(x, T, w, y, ldy, row_begin, row_end);
      break;
    case DType::Q4_0:
      matmul_dtype<DType::Q4_0>(x, T, w, y, ldy, row_begin, row_end);
      break;
  }
}

}  // namespace ember::cpu::avx2
