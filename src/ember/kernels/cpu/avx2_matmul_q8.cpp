// AVX2 quantized-weight matmul against 8-bit activations (see BlockQ8Act in kernels.h).
//
// Per 32-block the integer dot product uses the sign trick: maddubs multiplies unsigned by signed
// bytes, so |w| is paired with x carrying w's sign (|w|, |x| <= 127, so the pairwise int16 sums
// cannot saturate); madd with ones widens to 8 int32 lanes, which are converted to float and
// accumulated with the block's scale d_w * d_x by one FMA. q4_0 nibbles are unpacked to
// (nibble - 8) first and then take the same path.
//
// Determinism: each output element owns one 8-lane accumulator updated block by block in
// increasing order and reduced by hsum(); tiles only decide which elements run side by side.
#include <algorithm>

#include "ember/kernels/cpu/avx2_util.h"
#include "ember/kernels/cpu/kernels_isa.h"

namespace ember::cpu::avx2 {
namespace {

// The 32 weights of block `b` of a row as signed bytes, and its scale.
template <DType kDtype>
EMBER_AVX2_INLINE __m256i load_weights(const uint8_t* row, int64_t b, float* d) {
  if constexpr (kDtype == DType::Q8_0) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  } else {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m128i low_mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(packed, low_mask);                     // values 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);  // values 16..31
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
  }
}

// 8 int32 lanes summing to dot(w, x) over one block.
EMBER_AVX2_INLINE __m256i block_dot(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i x_signed = _mm256_sign_epi8(x, w);
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, x_signed);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// R rows x NT tokens; xq: NT rows of nb blocks; y[t * ldy + r].
template <DType kDtype, int R, int NT>
EMBER_AVX2 void tile(const BlockQ8Act* xq, int64_t nb, const uint8_t* w, int64_t row_bytes,
                     float* y, int64_t ldy) {
  __m256 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xv[NT];
    float dx[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const BlockQ8Act& xb = xq[t * nb + b];
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
      dx[t] = xb.d;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float dw;
      const __m256i wv = load_weights<kDtype>(w + r * row_bytes, b, &dw);
      const __m256i w_abs = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256 dot = _mm256_cvtepi32_ps(block_dot(w_abs, wv, xv[t]));
        acc[r][t] = _mm256_fmadd_ps(dot, _mm256_set1_ps(dw * dx[t]), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum(acc[r][t]);
  }
}

template <DType kDtype, int R>
EMBER_AVX2_INLINE void tile_tokens(const BlockQ8Act* xq, int nt, int64_t nb, const uint8_t* w,
                                   int64_t row_bytes, float* y, int64_t ldy) {
  switch (nt) {
    case 1:
      tile<kDtype, R, 1>(xq, nb, w, row_bytes, y, ldy);
      break;
    case 2:
      tile<kDtype, R, 2>(xq, nb, w, row_bytes, y, ldy);
      break;
    default:
      tile<kDtype, R, 3>(xq, nb, w, row_bytes, y, ldy);
      break;
  }
}

// T = 1: 4 rows per tile. T > 1: 4 rows x 3 tokens, token blocks of 48 so a tile's activations
// stay in L1 while its rows stream.
template <DType kDtype>
EMBER_AVX2 void matmul_q8_dtype(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                                int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.n_cols / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  constexpr int R = 4, NT = 3;
  constexpr int64_t kTokenBlock = 48;
  for (int64_t t0 = 0; t0 < T; t0 += kTokenBlock) {
    const int64_t t1 = std::min(T, t0 + kTokenBlock);
    int64_t n = row_begin;
    for (; n + R <= row_end; n += R) {
      for (int64_t t = t0; t < t1; t += NT) {
        const int nt = static_cast<int>(std::min<int64_t>(NT, t1 - t));
        tile_tokens<kDtype, R>(xq + t * nb, nt, nb, base + n * rb, rb, y + t * ldy + n, ldy);
      }
    }
    for (; n < row_end; ++n) {
      for (int64_t t = t0; t < t1; t += NT) {
        const int nt = static_cast<int>(std::min<int64_t>(NT, t1 - t));
        tile_tokens<kDtype, 1>(xq + t * nb, nt, nb, base + n * rb, rb, y + t * ldy + n, ldy);
      }
    }
  }
}

}  // namespace

EMBER_AVX2 void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out) {
  const int64_t n_blocks = T * (K / kQuantBlock);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* xb = x + i * kQuantBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      v[c] = _mm256_loadu_ps(xb + 8 * c);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[c]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    // Round to nearest even, as std::nearbyint does in the reference.
    __m256i q[4];
    for (int c = 0; c < 4; ++c) {
      q[c] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[c], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // int32 -> int8 with the lane shuffles packs introduce undone by one permute.
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i bytes = _mm256_packs_epi16(p01, p23);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i].qs), bytes);
    // Sum of the 32 bytes: sign-extend-free via madd of pairs after maddubs with ones.
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes);
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    out[i].sum = _mm_cvtsi128_si32(s);
    out[i].d = d;
  }
}

void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end) {
  if (w.dtype == DType::Q8_0) {
    matmul_q8_dtype<DType::Q8_0>(xq, T, w, y, ldy, row_begin, row_end);
  } else {
    matmul_q8_dtype<DType::Q4_0>(xq, T, w, y, ldy, row_begin, row_end);
  }
}

}  // namespace ember::cpu::avx2
