#include "ember/backend/cpu/amx_weight_tiles.h"

#include <cstring>

#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu {
namespace {

// uint16 index, within a block, of W[row j of the block][k].
inline int64_t block_index(int64_t j, int64_t k) {
  const int64_t chunk = k / kAmxChunkK, p = (k % kAmxChunkK) / 2, e = k % 2;
  return chunk * (kAmxChunkBytes / 2) + p * (2 * kAmxBlockRows) + j * 2 + e;
}

}  // namespace

// Vectorized: each 16 rows' 32 values of a chunk are 16 pairs per row, loaded as 16 vectors (lane
// p = pair p) and transposed so that vector p holds pair p of the 16 rows: one 64-byte quarter of
// the chunk's row p. ~40x the scalar loop below, which a CPU without AVX-512 (never the AMX set,
// but tests) still takes.
EMBER_AVX512 void pack_block_avx512(const WeightMatrix& rows, int64_t block, uint8_t* out) {
  const int64_t K = rows.n_cols;
  for (int64_t c = 0; c < amx_chunks(K); ++c) {
    const __mmask32 cols = avx512::lanes32(K - c * kAmxChunkK);
    for (int64_t q = 0; q < kAmxBlockRows / kAmxTileRows; ++q) {
      __m512i r[16];
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t n = block * kAmxBlockRows + q * kAmxTileRows + j;
        r[j] = n < rows.n_rows
                   ? _mm512_maskz_loadu_epi16(cols, static_cast<const uint8_t*>(rows.data) +
                                                        n * rows.row_bytes + c * kAmxChunkK * 2)
                   : _mm512_setzero_si512();
      }
      avx512::transpose16(r);
      uint8_t* chunk = out + c * kAmxChunkBytes + q * 64;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(chunk + p * kAmxTileStride, r[p]);
    }
  }
}

void pack_amx_block(const WeightMatrix& rows, int64_t block, uint8_t* out) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    return pack_block_avx512(rows, block, out);
  }
  const int64_t K = rows.n_cols;
  std::memset(out, 0, static_cast<size_t>(amx_block_bytes(K)));
  auto* values = reinterpret_cast<uint16_t*>(out);
  for (int64_t j = 0; j < kAmxBlockRows; ++j) {
    const int64_t n = block * kAmxBlockRows + j;
    if (n >= rows.n_rows) break;
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(rows.data) +
                                                        n * rows.row_bytes);
    for (int64_t k = 0; k < K; ++k) values[block_index(j, k)] = row[k];
  }
}

WeightMatrix pack_amx_tiles(const WeightMatrix& src, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t block_bytes = amx_block_bytes(src.n_cols);
  for (int64_t b = 0; b < amx_blocks(src.n_rows); ++b)
    pack_amx_block(src, b, out + b * block_bytes);
  WeightMatrix packed = src;
  packed.data = dst;
  packed.layout = WeightLayout::AmxTiles;
  return packed;
}

void amx_tiles_row(const WeightMatrix& w, int64_t row, uint8_t* out) {
  const int64_t K = w.n_cols, j = row % kAmxBlockRows;
  const auto* block = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) +
                                                        row / kAmxBlockRows * amx_block_bytes(K));
  auto* values = reinterpret_cast<uint16_t*>(out);
  for (int64_t k = 0; k < K; ++k) values[k] = block[block_index(j, k)];
}

}  // namespace ember::cpu
