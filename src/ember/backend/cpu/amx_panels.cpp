// q8_0 / q4_0 Interleaved8 blocks widened to the AmxTiles layout (amx_weight_tiles.h), one 64-row
// block at a time as four tiles of 16 rows (two 8-row groups each), for the tile GEMM
// (amx_matmul.cpp).
//
// A q8_0 / q4_0 block covers 32 values of K, exactly one tile chunk. Within a group the quants
// come 4 bytes per row at a time (weight_layout.h: qs[c][r][4], values 4c..4c+3 of row r), so one
// 32-byte load per group gives 4 consecutive values of 8 rows: two loads give the 16 rows of the
// block. Widened (d * q, exact in f32) and rounded to bf16, pairs (4c, 4c+1) and (4c+2, 4c+3) of
// the 16 rows are the even and odd 32-bit lanes: two permutes make tile rows 2c and 2c + 1.
// q4_0 byte j holds value j (low nibble) and value j + 16 (high nibble), minus 8.
#include <cstring>

#include "ember/backend/cpu/amx_kernels.h"
#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/weight_layout.h"

namespace ember::cpu::amx {
namespace {

// (Zero-masked forms with every lane: GCC 12's plain ones read an "undefined" vector and warn.)
constexpr auto kAll = static_cast<__mmask16>(0xffff);

// The 16 rows' scales of one block (group g0's 8, then g1's; g1 absent: zeros) as f32.
EMBER_AVX512_INLINE __m512 block_scales(const uint16_t* d0, const uint16_t* d1) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d0));
  const __m128i hi =
      d1 != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(d1)) : _mm_setzero_si128();
  return _mm512_maskz_cvtph_ps(kAll, _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// Scale vectors for the 4 widened quarters: quarter i holds rows 4i..4i+3, 4 values each.
struct QuarterScales {
  __m512 s[4];
};

EMBER_AVX512_INLINE QuarterScales quarter_scales(__m512 d) {
  QuarterScales q;
  for (int i = 0; i < 4; ++i) {
    const __m512i idx = _mm512_setr_epi32(4 * i, 4 * i, 4 * i, 4 * i, 4 * i + 1, 4 * i + 1,
                                          4 * i + 1, 4 * i + 1, 4 * i + 2, 4 * i + 2, 4 * i + 2,
                                          4 * i + 2, 4 * i + 3, 4 * i + 3, 4 * i + 3, 4 * i + 3);
    q.s[i] = _mm512_maskz_permutexvar_ps(kAll, idx, d);
  }
  return q;
}

EMBER_AVX512_INLINE __m512 widen(__m128i q, __m512 s) {
  return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, q)), s);
}

// q4_0 nibbles as signed values: low (values j) and high (values j + 16) of each byte, minus 8.
EMBER_AVX512_INLINE __m256i low_nibbles(__m256i v) {
  return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}
EMBER_AVX512_INLINE __m256i high_nibbles(__m256i v) {
  return low_nibbles(_mm256_srli_epi16(v, 4));
}

// 64 signed values (rows 0..7 then 8..15 of the block, 4 consecutive values each, in `lo` and
// `hi`), times their rows' scales, as tile rows `row` (pairs 0,1 of each value quad) and row + 1.
EMBER_AVX512_INLINE void store_quad_rows(__m256i lo, __m256i hi, const QuarterScales& sc,
                                         uint8_t* tile, int64_t row) {
  const __m512 f0 = widen(_mm256_castsi256_si128(lo), sc.s[0]);
  const __m512 f1 = widen(_mm256_extracti128_si256(lo, 1), sc.s[1]);
  const __m512 f2 = widen(_mm256_castsi256_si128(hi), sc.s[2]);
  const __m512 f3 = widen(_mm256_extracti128_si256(hi, 1), sc.s[3]);
  const __m512bh b01 = _mm512_cvtne2ps_pbh(f1, f0);  // lane 2r + e: row r, pair e (rows 0..7)
  const __m512bh b23 = _mm512_cvtne2ps_pbh(f3, f2);  // rows 8..15
  const __m512i v01 = reinterpret_cast<const __m512i&>(b01);
  const __m512i v23 = reinterpret_cast<const __m512i&>(b23);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  _mm512_storeu_si512(tile + row * kAmxTileStride, _mm512_permutex2var_epi32(v01, even, v23));
  _mm512_storeu_si512(tile + (row + 1) * kAmxTileStride, _mm512_permutex2var_epi32(v01, odd, v23));
}

template <typename Block>
const Block* group_blocks(const WeightMatrix& w, int64_t group) {
  if (group * kInterleavedRows >= w.n_rows) return nullptr;
  return reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) +
                                        group * kInterleavedRows * w.row_bytes);
}

EMBER_AVX512_INLINE __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// One tile per quant block of the 16-row tile: tile_of(q0, q1, scales, tile) for the blocks of
// groups 2 tile and 2 tile + 1 (q1 null when the second group is past the matrix; a tile whose
// first group is past it is left zero).
template <typename Block, typename TileOf>
EMBER_AVX512_INLINE void widen_tile(const WeightMatrix& w, int64_t tile, uint8_t* out,
                                    TileOf tile_of) {
  const auto* g0 = group_blocks<Block>(w, 2 * tile);
  const auto* g1 = group_blocks<Block>(w, 2 * tile + 1);
  for (int64_t b = 0; b < w.n_cols / kAmxChunkK; ++b) {
    uint8_t* chunk = out + b * kAmxChunkBytes;
    if (g0 == nullptr) {
      for (int64_t p = 0; p < 16; ++p) std::memset(chunk + p * kAmxTileStride, 0, 64);
      continue;
    }
    const Block* q1 = g1 != nullptr ? g1 + b : nullptr;
    const QuarterScales sc = quarter_scales(block_scales(g0[b].d, q1 != nullptr ? q1->d : nullptr));
    tile_of(g0[b], q1, sc, chunk);
  }
}

template <typename Block, typename TileOf>
EMBER_AVX512_INLINE void widen_blocks(const WeightMatrix& w, int64_t block, uint8_t* out,
                                      TileOf tile_of) {
  for (int64_t j = 0; j < kAmxBlockRows / kAmxTileRows; ++j) {
    widen_tile<Block>(w, block * (kAmxBlockRows / kAmxTileRows) + j, out + j * 4 * kAmxTileRows,
                      tile_of);
  }
}

// (Functors, not lambdas: a lambda does not inherit the AVX-512 target.)
struct Q8Tile {
  EMBER_AVX512_INLINE void operator()(const BlockQ8_0x8& q0, const BlockQ8_0x8* q1,
                                      const QuarterScales& sc, uint8_t* tile) const {
    for (int c = 0; c < 8; ++c) {
      const __m256i hi = q1 != nullptr ? load32(q1->qs[c]) : _mm256_setzero_si256();
      store_quad_rows(load32(q0.qs[c]), hi, sc, tile, 2 * c);
    }
  }
};

struct Q4Tile {
  EMBER_AVX512_INLINE void operator()(const BlockQ4_0x8& q0, const BlockQ4_0x8* q1,
                                      const QuarterScales& sc, uint8_t* tile) const {
    for (int c = 0; c < 4; ++c) {
      const __m256i v0 = load32(q0.qs[c]);
      const __m256i v1 = q1 != nullptr ? load32(q1->qs[c]) : _mm256_set1_epi8(0x08);
      store_quad_rows(low_nibbles(v0), low_nibbles(v1), sc, tile, 2 * c);        // values 4c..4c+3
      store_quad_rows(high_nibbles(v0), high_nibbles(v1), sc, tile, 2 * c + 8);  // values 16+4c..
    }
  }
};

EMBER_AVX512 void widen_q8_0(const WeightMatrix& w, int64_t block, uint8_t* out) {
  widen_blocks<BlockQ8_0x8>(w, block, out, Q8Tile{});
}

EMBER_AVX512 void widen_q4_0(const WeightMatrix& w, int64_t block, uint8_t* out) {
  widen_blocks<BlockQ4_0x8>(w, block, out, Q4Tile{});
}

}  // namespace

void widen_block_to_tiles(const WeightMatrix& w, int64_t block, uint8_t* out) {
  if (w.dtype == DType::Q8_0) return widen_q8_0(w, block, out);
  widen_q4_0(w, block, out);
}

}  // namespace ember::cpu::amx
