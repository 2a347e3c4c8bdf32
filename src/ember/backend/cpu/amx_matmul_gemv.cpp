// Decode (fewer than 16 tokens) on an AmxTiles bf16 matrix with AVX-512 BF16 (vdpbf16ps).
//
// A block's chunk row p is 256 bytes: the pair (2p, 2p + 1) of K of each of the block's 64 weight
// rows. vdpbf16ps of each 64-byte quarter with one token's pair p broadcast to every lane adds
// both products into each row's lane: after all of a block's chunks, four vectors hold the 64
// rows' dot products, with no horizontal sums, and the weights are read in address order (a
// block's chunks are contiguous), one stream the hardware prefetchers follow.
//
// Determinism: per (row, token) one accumulator over the pairs in order: the same bits for any T
// below 16, any row range and any thread.
#include <algorithm>

#include "ember/backend/cpu/amx_kernels.h"
#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu::amx {
namespace {

EMBER_AVX512_INLINE __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// One block (64 rows) against NT tokens (x rows P pairs apart): the 64 sums per token, stored to
// y for the rows whose lanes are set in rows[q] (quarter q: rows n0 + 16 q ..).
template <int NT>
EMBER_AVX512 void block_tokens(const uint32_t* x, int64_t P, int64_t chunks, const uint8_t* block,
                               float* y, int64_t ldy, int64_t n0, const __mmask16 (&rows)[4]) {
  __m512 acc[NT][4];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    for (int q = 0; q < 4; ++q) acc[t][q] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const uint8_t* chunk = block + c * kAmxChunkBytes;
    const uint32_t* xc = x + c * (kAmxChunkK / 2);
#pragma GCC unroll 2
    for (int p = 0; p < 16; ++p) {
      const uint8_t* row = chunk + p * kAmxTileStride;
      const __m512i w0 = _mm512_loadu_si512(row);
      const __m512i w1 = _mm512_loadu_si512(row + 64);
      const __m512i w2 = _mm512_loadu_si512(row + 128);
      const __m512i w3 = _mm512_loadu_si512(row + 192);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512bh xb = as_bh(_mm512_set1_epi32(static_cast<int>(xc[t * P + p])));
        acc[t][0] = _mm512_dpbf16_ps(acc[t][0], as_bh(w0), xb);
        acc[t][1] = _mm512_dpbf16_ps(acc[t][1], as_bh(w1), xb);
        acc[t][2] = _mm512_dpbf16_ps(acc[t][2], as_bh(w2), xb);
        acc[t][3] = _mm512_dpbf16_ps(acc[t][3], as_bh(w3), xb);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    for (int q = 0; q < 4; ++q) {
      _mm512_mask_storeu_ps(y + t * ldy + n0 + 16 * q, rows[q], acc[t][q]);
    }
  }
}

// Lanes of rows [lo, hi) among the 16 of a tile (none when the range misses it).
__mmask16 lane_mask(int64_t lo, int64_t hi) {
  lo = std::clamp<int64_t>(lo, 0, 16);
  hi = std::clamp<int64_t>(hi, 0, 16);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

}  // namespace

EMBER_AVX512 void tiles_gemv(const uint32_t* xp, int64_t T, const WeightMatrix& w, float* y,
                             int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end) return;
  const int64_t K = w.n_cols, chunks = amx_chunks(K), P = chunks * (kAmxChunkK / 2);
  const int64_t block_bytes = amx_block_bytes(K);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t block = row_begin / kAmxBlockRows; block * kAmxBlockRows < row_end; ++block) {
    const int64_t n0 = block * kAmxBlockRows;
    // Lanes of the rows in [row_begin, row_end): the ones this call owns.
    const __mmask16 rows[4] = {lane_mask(row_begin - n0, row_end - n0),
                               lane_mask(row_begin - n0 - 16, row_end - n0 - 16),
                               lane_mask(row_begin - n0 - 32, row_end - n0 - 32),
                               lane_mask(row_begin - n0 - 48, row_end - n0 - 48)};
    const uint8_t* tiles = base + block * block_bytes;
    for (int64_t t = 0; t < T; t += 4) {
      const uint32_t* x = xp + t * P;
      float* yt = y + t * ldy;
      switch (std::min<int64_t>(4, T - t)) {
        case 1:
          block_tokens<1>(x, P, chunks, tiles, yt, ldy, n0, rows);
          break;
        case 2:
          block_tokens<2>(x, P, chunks, tiles, yt, ldy, n0, rows);
          break;
        case 3:
          block_tokens<3>(x, P, chunks, tiles, yt, ldy, n0, rows);
          break;
        default:
          block_tokens<4>(x, P, chunks, tiles, yt, ldy, n0, rows);
          break;
      }
    }
  }
}

}  // namespace ember::cpu::amx
