// AVX2 quantized matmul on Interleaved8 weights: 8 rows x NT tokens per tile, one row per 32-bit
// lane.
//
// A 32-byte load of an interleaved block holds 4 consecutive quant bytes of each of the 8 rows;
// the activation's matching 4 bytes are broadcast to all lanes, so maddubs + madd leave row r's
// partial dot product in lane r. After the block's 32 values the lanes hold the 8 exact integer
// block dots; they are converted to f32 once and accumulated with the 8 rows' scales (one f16 ->
// f32 conversion of 8 scales) times the activation scale:
//   y[t, n] = sum_b float(dot_b(n, t)) * (d_w(n, b) * d_x(t, b)),   b in increasing order.
// Compared with the Rows-layout kernel (avx2_matmul_q8.cpp) that needs no horizontal sums and
// converts a scale per 8 rows instead of per row: about half the instructions per weight byte
// (q4_0 GEMV in L2, one thread: 10-12 -> 27-31 GB/s).
//
//   q4_0: nibbles u = w + 8 in 0..15 times activations |x| <= 127: a maddubs lane (two products)
//         is at most 3810 in magnitude, so the 8 maddubs of a block (4 chunks x low/high nibbles)
//         are summed in int16 (<= 30480) before one madd; the offset is taken back as 8 * sum(x).
//   q8_0: the sign trick (|w| times x carrying w's sign); a maddubs lane can reach 2 * 127 * 128,
//         so each chunk is widened by madd before it is summed.
//
// Determinism: each output's sum runs over blocks in order with exact integer block dots, the same
// for every NT, tile and row range, so any T gives the same bits (interleaved matrices take 8-bit
// activations at every T: prefill runs these tiles too, ~1.4x the f32 GEMM on dequantized panels).
#include "ember/kernels/cpu/avx2_matmul_interleaved.h"

#include <algorithm>

#include "ember/kernels/cpu/avx2_prefetch.h"
#include "ember/kernels/cpu/avx2_util.h"
#include "ember/kernels/cpu/weight_layout.h"

namespace ember::cpu::avx2 {
namespace {

// The 4 activation bytes [k, k + 4) of a block in every 32-bit lane.
EMBER_AVX2_INLINE __m256i broadcast4(const BlockQ8Act& xb, int k) {
  return _mm256_set1_epi32(load_u32(xb.qs + k));
}

// The 8 rows' exact integer dot products with NT activation blocks (xb[t]) for one block.
template <DType kDtype, int NT>
EMBER_AVX2_INLINE void block_dots(const uint8_t* group, int64_t b, const BlockQ8Act* const* xb,
                                  __m256i dot[NT]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kDtype == DType::Q4_0) {
    const BlockQ4_0x8& blk = reinterpret_cast<const BlockQ4_0x8*>(group)[b];
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i sum16[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) sum16[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[c]));
      const __m256i lo = _mm256_and_si256(v, low4);                        // values 4c..4c+3
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);  // values 16+4c..
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        sum16[t] = _mm256_add_epi16(sum16[t], _mm256_maddubs_epi16(lo, broadcast4(*xb[t], 4 * c)));
        sum16[t] =
            _mm256_add_epi16(sum16[t], _mm256_maddubs_epi16(hi, broadcast4(*xb[t], 16 + 4 * c)));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      dot[t] =
          _mm256_sub_epi32(_mm256_madd_epi16(sum16[t], ones), _mm256_set1_epi32(8 * xb[t]->sum));
    }
  } else {
    const BlockQ8_0x8& blk = reinterpret_cast<const BlockQ8_0x8*>(group)[b];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[c]));
      const __m256i abs = _mm256_sign_epi8(v, v);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256i pairs =
            _mm256_maddubs_epi16(abs, _mm256_sign_epi8(broadcast4(*xb[t], 4 * c), v));
        dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
}

// One group of 8 rows x NT tokens (token t's blocks at xq + t * nb): out[t] = the 8 rows' outputs.
template <DType kDtype, int NT>
EMBER_AVX2 void group_tile(const BlockQ8Act* xq, int64_t nb, const uint8_t* group, __m256 out[NT],
                           LinePrefetcher* prefetch) {
  constexpr int64_t kBlockBytes = kDtype == DType::Q4_0 ? sizeof(BlockQ4_0x8) : sizeof(BlockQ8_0x8);
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch != nullptr) prefetch->step();
    const BlockQ8Act* xb[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) xb[t] = xq + t * nb + b;
    __m256i dot[NT];
    block_dots<kDtype, NT>(group, b, xb, dot);
    // Block b's 8 f16 scales sit at the start of its interleaved block.
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(group + b * kBlockBytes)));
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(xb[t]->d)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// Writes rows [lo, hi) of a group's results (row g0 + r in lane r) for NT tokens.
template <int NT>
EMBER_AVX2_INLINE void store_group(const __m256 out[NT], int64_t g0, int64_t lo, int64_t hi,
                                   float* y, int64_t ldy) {
  if (lo == g0 && hi == g0 + kInterleavedRows) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * ldy + g0, out[t]);
    return;
  }
  alignas(32) float lanes[kInterleavedRows];
  for (int t = 0; t < NT; ++t) {
    _mm256_store_ps(lanes, out[t]);
    for (int64_t n = lo; n < hi; ++n) y[t * ldy + n] = lanes[n - g0];
  }
}

// Tokens [t0, t0 + NT) against groups covering rows [row_begin, row_end).
template <DType kDtype, int NT>
EMBER_AVX2 void token_tile_rows(const BlockQ8Act* xq, int64_t nb, const WeightMatrix& w, float* y,
                                int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t group_bytes = kInterleavedRows * w.row_bytes;
  const uint8_t* limit = interleaved_group(w, row_end - 1) + group_bytes;
  for (int64_t g0 = row_begin / kInterleavedRows * kInterleavedRows; g0 < row_end;
       g0 += kInterleavedRows) {
    const uint8_t* group = interleaved_group(w, g0);
    __m256 out[NT];
    if constexpr (NT == 1) {
      // Decode streams the weights from memory: pull the next group in while this one computes.
      auto prefetch = LinePrefetcher::ahead(group, group_bytes, limit, nb);
      group_tile<kDtype, 1>(xq, nb, group, out, &prefetch);
    } else {
      group_tile<kDtype, NT>(xq, nb, group, out, nullptr);
    }
    store_group<NT>(out, g0, std::max(g0, row_begin), std::min(g0 + kInterleavedRows, row_end), y,
                    ldy);
  }
}

// T = 1: 8 rows per tile. T > 1: 8 rows x 4 tokens, so a group's weights (a few KiB) are read from
// memory once and reused from L1 for the other token tiles.
template <DType kDtype>
EMBER_AVX2 void matmul_dtype(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                             int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.n_cols / kQuantBlock;
  if (T == 1) return token_tile_rows<kDtype, 1>(xq, nb, w, y, ldy, row_begin, row_end);
  constexpr int64_t kNT = 4;
  // Rows in chunks of 8 groups, all token tiles per chunk: the chunk's weights stay in L1/L2.
  const int64_t chunk = 8 * kInterleavedRows;
  for (int64_t r0 = row_begin; r0 < row_end; r0 = (r0 / chunk + 1) * chunk) {
    const int64_t r1 = std::min(row_end, (r0 / chunk + 1) * chunk);
    for (int64_t t = 0; t < T; t += kNT) {
      const BlockQ8Act* xt = xq + t * nb;
      float* yt = y + t * ldy;
      switch (std::min(kNT, T - t)) {
        case 1:
          token_tile_rows<kDtype, 1>(xt, nb, w, yt, ldy, r0, r1);
          break;
        case 2:
          token_tile_rows<kDtype, 2>(xt, nb, w, yt, ldy, r0, r1);
          break;
        case 3:
          token_tile_rows<kDtype, 3>(xt, nb, w, yt, ldy, r0, r1);
          break;
        default:
          token_tile_rows<kDtype, 4>(xt, nb, w, yt, ldy, r0, r1);
          break;
      }
    }
  }
}

}  // namespace

void matmul_q8_interleaved(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                           int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end) return;
  if (w.dtype == DType::Q8_0)
    return matmul_dtype<DType::Q8_0>(xq, T, w, y, ldy, row_begin, row_end);
  matmul_dtype<DType::Q4_0>(xq, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx2
