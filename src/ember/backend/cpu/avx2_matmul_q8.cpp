// AVX2 quantized-weight matmul against 8-bit activations (see BlockQ8Act in kernels.h).
//
// Per 32-block an integer dot product (maddubs + madd, see WeightBlock) gives 8 int32 lanes, which
// are converted to float and accumulated with the block's scale d_w * d_x by one FMA.
//
// Determinism: each output element owns one 8-lane accumulator updated block by block in
// increasing order and reduced by hsum(); tiles only decide which elements run side by side.
#include <algorithm>

#include "ember/backend/cpu/avx2_matmul_interleaved.h"
#include "ember/backend/cpu/avx2_prefetch.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/quant_row_dot.h"

namespace ember::cpu::avx2 {
namespace {

// The dot product of one weight block with one activation block as 8 int32 lanes whose sum is
// the exact integer dot product, and the block's weight scale.
//   q8_0: the sign trick. maddubs multiplies unsigned by signed bytes, so |w| is paired with x
//         carrying w's sign (|w|, |x| <= 127: the pairwise int16 sums cannot saturate).
//   q4_0: the stored nibbles u = w + 8 are already unsigned, so maddubs(u, x) runs directly
//         (15 * 127 * 2 fits int16) and the offset is taken back as 8 * sum(x), precomputed per
//         activation block, from lane 0: sum_i (u_i - 8) x_i = sum_i u_i x_i - 8 sum_i x_i.
template <DType kDtype>
struct WeightBlock;

template <>
struct WeightBlock<DType::Q8_0> {
  __m256i abs, sign;
  EMBER_AVX2_INLINE WeightBlock(const uint8_t* row, int64_t b, float* d) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    sign = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
    abs = _mm256_sign_epi8(sign, sign);
  }
  EMBER_AVX2_INLINE __m256i dot(__m256i x, __m256i /*x_offset*/) const {
    const __m256i pairs = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(x, sign));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
};

template <>
struct WeightBlock<DType::Q4_0> {
  __m256i nibbles;  // values 0..15: bytes 0-15 from the low nibbles, 16-31 from the high ones
  EMBER_AVX2_INLINE WeightBlock(const uint8_t* row, int64_t b, float* d) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    const __m256i both =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
    nibbles = _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)),
                               _mm256_set1_epi8(0x0f));
  }
  // x_offset: 8 * sum(x) in lane 0, zeros elsewhere.
  EMBER_AVX2_INLINE __m256i dot(__m256i x, __m256i x_offset) const {
    const __m256i pairs = _mm256_maddubs_epi16(nibbles, x);
    return _mm256_sub_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), x_offset);
  }
};

// R rows x NT tokens; xq: NT rows of nb blocks; y[t * ldy + r]. `prefetch` (decode) pulls the
// next tile's rows into cache meanwhile (see avx2_prefetch.h).
template <DType kDtype, int R, int NT>
EMBER_AVX2 void tile(const BlockQ8Act* xq, int64_t nb, const uint8_t* w, int64_t row_bytes,
                     float* y, int64_t ldy, LinePrefetcher* prefetch) {
  __m256 acc[R][NT];
  zero_accumulators(acc);
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch != nullptr) prefetch->step();
    __m256i xv[NT], x_offset[NT];
    __m256 dx[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const BlockQ8Act& xb = xq[t * nb + b];
      xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
      x_offset[t] = kDtype == DType::Q4_0 ? _mm256_zextsi128_si256(_mm_cvtsi32_si128(8 * xb.sum))
                                          : _mm256_setzero_si256();
      dx[t] = _mm256_set1_ps(xb.d);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float dw;
      const WeightBlock<kDtype> wb(w + r * row_bytes, b, &dw);
      const __m256 dwv = _mm256_set1_ps(dw);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        // d_w * d_x as one vector multiply of two broadcasts (the same f32 product as the scalar
        // one, so every T gives the same bits).
        const __m256 dot = _mm256_cvtepi32_ps(wb.dot(xv[t], x_offset[t]));
        acc[r][t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dwv, dx[t]), acc[r][t]);
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
      tile<kDtype, R, 1>(xq, nb, w, row_bytes, y, ldy, nullptr);
      break;
    case 2:
      tile<kDtype, R, 2>(xq, nb, w, row_bytes, y, ldy, nullptr);
      break;
    default:
      tile<kDtype, R, 3>(xq, nb, w, row_bytes, y, ldy, nullptr);
      break;
  }
}

// T = 1: 4 rows per tile, the next 4 prefetched meanwhile. T > 1: 4 rows x 3 tokens, token blocks
// of 48 so a tile's activations stay in L1 while its rows stream.
template <DType kDtype>
EMBER_AVX2 void matmul_q8_dtype(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                                int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.n_cols / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  constexpr int R = 4, NT = 3;
  if (T == 1) {
    int64_t n = row_begin;
    for (; n + R <= row_end; n += R) {
      auto prefetch = LinePrefetcher::ahead(base + n * rb, R * rb, base + row_end * rb, nb);
      tile<kDtype, R, 1>(xq, nb, base + n * rb, rb, y + n, ldy, &prefetch);
    }
    for (; n < row_end; ++n) tile<kDtype, 1, 1>(xq, nb, base + n * rb, rb, y + n, ldy, nullptr);
    return;
  }
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
  if (w.layout == WeightLayout::Interleaved8) {
    return matmul_q8_interleaved(xq, T, w, y, ldy, row_begin, row_end);
  }
  if (w.dtype == DType::Q8_0) {
    matmul_q8_dtype<DType::Q8_0>(xq, T, w, y, ldy, row_begin, row_end);
  } else if (w.dtype == DType::Q4_0) {
    matmul_q8_dtype<DType::Q4_0>(xq, T, w, y, ldy, row_begin, row_end);
  } else {  // the other block types, one row dot per output (quant_row_dot.h)
    QuantRowDot dot = avx2::quant_row_dot(w.dtype);
    if (dot == nullptr) dot = scalar::quant_row_dot(w.dtype);
    matmul_q8_row_dots(dot, avx2::quant_row_dot4(w.dtype), xq, T, w, y, ldy, row_begin, row_end);
  }
}

}  // namespace ember::cpu::avx2
