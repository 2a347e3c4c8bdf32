// The AmxTiles layout of bf16 matrices (WeightLayout::AmxTiles), made once at load when the AMX
// kernel set is active, and the same layout built on the fly ("panels") from q8_0 / q4_0 blocks.
//
// TDPBF16PS C += A B multiplies A [16 tokens][32 bf16 of K] by B [16 pairs of K][16 columns][2]:
// B's row p holds, for each of 16 output columns (weight rows n), the pair (k = 2p, 2p + 1). The
// weight rows are cut into blocks of 64 (the last zero-padded) and K into chunks of 32 (the last
// zero-padded); a (block, chunk) is 4 KiB, [16 pairs][64 rows][2]:
//   chunk[p][j][e] = W[64 * block + j][32 * chunk + 2 p + e]        (p < 16, j < 64, e < 2)
// and a block's chunks follow each other, the blocks in row order (oneDNN's BA16a64b2a for the
// matrix W^T [K, N]: its brgemm could read the same bytes; see amx_matmul.cpp). A tile (16 rows
// n0.., chunk c) is 16 rows of 64 bytes, 256 bytes apart, at amx_tile(); one block's weights are
// one contiguous run that the AVX-512 decode kernel (amx_matmul_gemv.cpp) streams in address order,
// getting 64 rows' partial sums in four vectors with no horizontal adds.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu {

constexpr int64_t kAmxBlockRows = 64;     // weight rows per block
constexpr int64_t kAmxTileRows = 16;      // weight rows per tile (C's columns)
constexpr int64_t kAmxChunkK = 32;        // bf16 values of K per chunk
constexpr int64_t kAmxChunkBytes = 4096;  // one block's chunk
constexpr int64_t kAmxTileStride = 256;   // bytes between a tile's rows (pairs of K)

inline int64_t amx_chunks(int64_t K) {
  return (K + kAmxChunkK - 1) / kAmxChunkK;
}
inline int64_t amx_blocks(int64_t n_rows) {
  return (n_rows + kAmxBlockRows - 1) / kAmxBlockRows;
}
// Bytes of one 64-row block, and of a whole matrix in the layout.
inline int64_t amx_block_bytes(int64_t K) {
  return amx_chunks(K) * kAmxChunkBytes;
}
inline int64_t amx_tiles_bytes(int64_t n_rows, int64_t n_cols) {
  return amx_blocks(n_rows) * amx_block_bytes(n_cols);
}
// The tile of rows [n0, n0 + 16) (n0 % 16 == 0) and chunk 0 of a matrix in the layout at `data`
// (rows 256 bytes apart; chunk c is c * kAmxChunkBytes further).
inline const uint8_t* amx_tile(const uint8_t* data, int64_t K, int64_t n0) {
  return data + n0 / kAmxBlockRows * amx_block_bytes(K) +
         n0 % kAmxBlockRows / kAmxTileRows * (kAmxTileRows * 4);
}

// Rewrites a bf16 matrix in the Rows layout as AmxTiles into dst (amx_tiles_bytes(...) bytes, not
// overlapping src). Returns the view of dst (row_bytes stays a row's bf16 size).
WeightMatrix pack_amx_tiles(const WeightMatrix& src, void* dst);

// Rows [64 block, 64 block + 64) of a bf16 Rows-layout matrix as one block (rows past n_rows and
// columns past K zero) into out (amx_block_bytes(K) bytes).
void pack_amx_block(const WeightMatrix& rows, int64_t block, uint8_t* out);

// Row `row` of an AmxTiles matrix as its K bf16 values (row_bytes bytes).
void amx_tiles_row(const WeightMatrix& w, int64_t row, uint8_t* out);

}  // namespace ember::cpu
