// The Interleaved8 layout of q8_0 / q4_0 / q4_1 / q5_0 / q5_1 / iq4_nl / q2_k..q6_k /
// iq4_xs matrices (WeightLayout in kernels.h), made once at load.
//
// Rows are taken in groups of 8 (the last group zero-padded). For each block index b a group
// stores the 8 rows' blocks side by side: their 8 f16 scales (q4_1 / q5_1: then their 8 mins;
// q5_0 / q5_1: then their 8 high-bit words),
// then their quants interleaved 4 bytes at a time, so one 32-byte load holds the same 4 consecutive
// bytes of all 8 rows, one row per 32-bit lane. A decode kernel multiplies that against 4
// activation bytes broadcast to every lane and gets 8 rows' partial dot products in one vector: no
// horizontal sums, one scale conversion per 8 rows instead of per row (see
// avx2_matmul_interleaved.cpp). The bytes per block are unchanged: group g occupies exactly the
// span of rows 8g..8g+7 in the Rows layout.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"
#include "ember/core/dtype.h"
#include "ember/core/quant_blocks.h"

namespace ember::cpu {

constexpr int64_t kInterleavedRows = 8;

struct BlockQ4_0x8 {
  uint16_t d[kInterleavedRows];        // f16 scale of each row's block
  uint8_t qs[4][kInterleavedRows][4];  // [c][r]: bytes 4c..4c+3 of row r's BlockQ4_0::qs
};
static_assert(sizeof(BlockQ4_0x8) == kInterleavedRows * sizeof(BlockQ4_0));

struct BlockQ8_0x8 {
  uint16_t d[kInterleavedRows];       // f16 scale of each row's block
  int8_t qs[8][kInterleavedRows][4];  // [c][r]: values 4c..4c+3 of row r's block
};
static_assert(sizeof(BlockQ8_0x8) == kInterleavedRows * sizeof(BlockQ8_0));

// iq4_nl has q4_0's shape (f16 d, 16 bytes of nibbles): the same interleaved block.
using BlockIQ4_NLx8 = BlockQ4_0x8;
static_assert(sizeof(BlockIQ4_NLx8) == kInterleavedRows * sizeof(BlockIQ4_NL));

// q5_0: the nibbles as q4_0, and each row's 32 fifth bits (BlockQ5_0::qh, bit j for value j)
// rearranged into one word so that, for quant chunk c (values 4c..4c+3 in the low nibbles,
// 16+4c..16+4c+3 in the high ones), a shift by a constant puts every value's fifth bit at bit 4
// of its own byte:
//   word bit 8i + c     = fifth bit of value 4c + i        (i, c in 0..3; shift left by 4 - c)
//   word bit 8i + 4 + c = fifth bit of value 16 + 4c + i   (shift right by c)
// (see q5_word_from_qh / qh_from_q5_word).
struct BlockQ5_0x8 {
  uint16_t d[kInterleavedRows];        // f16 scale of each row's block
  uint8_t qh[kInterleavedRows][4];     // each row's rearranged fifth-bit word (little-endian)
  uint8_t qs[4][kInterleavedRows][4];  // [c][r]: bytes 4c..4c+3 of row r's BlockQ5_0::qs
};
static_assert(sizeof(BlockQ5_0x8) == kInterleavedRows * sizeof(BlockQ5_0));

uint32_t q5_word_from_qh(uint32_t qh);
uint32_t qh_from_q5_word(uint32_t word);

// q4_1 / q5_1: as q4_0 / q5_0 with the 8 rows' f16 mins after their scales.
struct BlockQ4_1x8 {
  uint16_t d[kInterleavedRows];
  uint16_t m[kInterleavedRows];
  uint8_t qs[4][kInterleavedRows][4];
};
static_assert(sizeof(BlockQ4_1x8) == kInterleavedRows * sizeof(BlockQ4_1));

struct BlockQ5_1x8 {
  uint16_t d[kInterleavedRows];
  uint16_t m[kInterleavedRows];
  uint8_t qh[kInterleavedRows][4];  // as BlockQ5_0x8::qh
  uint8_t qs[4][kInterleavedRows][4];
};
static_assert(sizeof(BlockQ5_1x8) == kInterleavedRows * sizeof(BlockQ5_1));

// q4_k: per super-block of 256 the 8 rows' d and dmin, then the 12 bytes of packed 6-bit scales and
// mins as three 4-byte words per row (word w = bytes 4w..4w+3 of BlockQ4_K::scales), so one 32-byte
// load holds word w of all 8 rows and the scales unpack for 8 rows at once, one row per lane; then
// the 128 quant bytes 4 at a time. Chunk c covers bytes 4c..4c+3: low nibbles are values
// 4(c % 8).. of sub-block 2(c / 8), high nibbles the same values of sub-block 2(c / 8) + 1.
struct BlockQ4_Kx8 {
  uint16_t d[kInterleavedRows];
  uint16_t dmin[kInterleavedRows];
  uint8_t scales[3][kInterleavedRows][4];  // [w][r]: word w of row r's packed scales
  uint8_t qs[32][kInterleavedRows][4];     // [c][r]: bytes 4c..4c+3 of row r's BlockQ4_K::qs
};
static_assert(sizeof(BlockQ4_Kx8) == kInterleavedRows * sizeof(BlockQ4_K));

// q5_k: as q4_k, with each row's 32 bytes of fifth bits (BlockQ5_K::qh: bit j of byte l is the
// fifth bit of value l of sub-block j) interleaved 4 bytes at a time before the quants.
struct BlockQ5_Kx8 {
  uint16_t d[kInterleavedRows];
  uint16_t dmin[kInterleavedRows];
  uint8_t scales[3][kInterleavedRows][4];
  uint8_t qh[8][kInterleavedRows][4];   // [c][r]: bytes 4c..4c+3 of row r's qh
  uint8_t qs[32][kInterleavedRows][4];  // as BlockQ4_Kx8::qs
};
static_assert(sizeof(BlockQ5_Kx8) == kInterleavedRows * sizeof(BlockQ5_K));

// q6_k, in the plain block's order: the low nibbles (ql) and the high 2-bit pairs (qh) 4 bytes at
// a time, then the 16 int8 scales as four words per row (word w = scales 4w..4w+3), then d.
struct BlockQ6_Kx8 {
  uint8_t ql[32][kInterleavedRows][4];  // [c][r]: bytes 4c..4c+3 of row r's ql
  uint8_t qh[16][kInterleavedRows][4];  // [c][r]: bytes 4c..4c+3 of row r's qh
  int8_t scales[4][kInterleavedRows][4];
  uint16_t d[kInterleavedRows];
};
static_assert(sizeof(BlockQ6_Kx8) == kInterleavedRows * sizeof(BlockQ6_K));

// iq4_xs: d, the high scale bits (scales_h) and the low ones (scales_l, one word) of the 8 rows,
// then the quants 4 bytes at a time: chunk c holds bytes 4c..4c+3 of qs, i.e. values 4(c % 4)..
// (low nibbles) and 16 + 4(c % 4).. (high) of sub-block c / 4.
struct BlockIQ4_XSx8 {
  uint16_t d[kInterleavedRows];
  uint16_t scales_h[kInterleavedRows];
  uint8_t scales_l[kInterleavedRows][4];
  uint8_t qs[32][kInterleavedRows][4];
};
static_assert(sizeof(BlockIQ4_XSx8) == kInterleavedRows * sizeof(BlockIQ4_XS));

// q2_k: the 16 scale|min bytes as four words per row, the 64 quant bytes 4 at a time, d, dmin.
struct BlockQ2_Kx8 {
  uint8_t scales[4][kInterleavedRows][4];
  uint8_t qs[16][kInterleavedRows][4];
  uint16_t d[kInterleavedRows];
  uint16_t dmin[kInterleavedRows];
};
static_assert(sizeof(BlockQ2_Kx8) == kInterleavedRows * sizeof(BlockQ2_K));

// q3_k: hmask and qs 4 bytes at a time, the 12 packed scale bytes as three words per row, d.
struct BlockQ3_Kx8 {
  uint8_t hmask[8][kInterleavedRows][4];
  uint8_t qs[16][kInterleavedRows][4];
  uint8_t scales[3][kInterleavedRows][4];
  uint16_t d[kInterleavedRows];
};
static_assert(sizeof(BlockQ3_Kx8) == kInterleavedRows * sizeof(BlockQ3_K));

// The dtypes that have an Interleaved8 layout: every quantized weight type but q8_1 (no tiles:
// it appears only in files that ask for it) and q8_k (an activation type).
inline bool has_interleaved_layout(DType dtype) {
  return dtype_is_quantized(dtype) && dtype != DType::Q8_1 && dtype != DType::Q8_K;
}

// Bytes of one interleaved block (8 rows' blocks; q4_k: super-blocks) of an interleaved dtype.
constexpr int64_t interleaved_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
      return sizeof(BlockQ8_0x8);
    case DType::Q5_0:
      return sizeof(BlockQ5_0x8);
    case DType::Q4_1:
      return sizeof(BlockQ4_1x8);
    case DType::Q5_1:
      return sizeof(BlockQ5_1x8);
    case DType::Q2_K:
      return sizeof(BlockQ2_Kx8);
    case DType::Q3_K:
      return sizeof(BlockQ3_Kx8);
    case DType::Q4_K:
      return sizeof(BlockQ4_Kx8);
    case DType::Q5_K:
      return sizeof(BlockQ5_Kx8);
    case DType::Q6_K:
      return sizeof(BlockQ6_Kx8);
    case DType::IQ4_XS:
      return sizeof(BlockIQ4_XSx8);
    default:  // q4_0, iq4_nl
      return sizeof(BlockQ4_0x8);
  }
}

// Bytes a matrix of this shape takes in `layout` (Interleaved8: whole groups of 8 rows).
int64_t weight_matrix_bytes(DType dtype, int64_t n_rows, int64_t n_cols, WeightLayout layout);

// Rewrites a Rows-layout matrix of an interleaved dtype as Interleaved8 into dst, which holds
// weight_matrix_bytes(..., Interleaved8) bytes; dst may be src.data itself when that buffer is this
// large (each group is read before its span is written). Returns the view of dst.
WeightMatrix interleave_rows(const WeightMatrix& src, void* dst);

// The start of the 8-row group holding `row`, and block b of that group.
inline const uint8_t* interleaved_group(const WeightMatrix& w, int64_t row) {
  return static_cast<const uint8_t*>(w.data) +
         row / kInterleavedRows * kInterleavedRows * w.row_bytes;
}

// Block b of `row` of a matrix in either layout, as the plain block.
BlockQ4_0 q4_0_block(const WeightMatrix& w, int64_t row, int64_t b);
BlockQ8_0 q8_0_block(const WeightMatrix& w, int64_t row, int64_t b);
BlockQ5_0 q5_0_block(const WeightMatrix& w, int64_t row, int64_t b);
BlockIQ4_NL iq4_nl_block(const WeightMatrix& w, int64_t row, int64_t b);

// Row `row` of a matrix in either layout as its Rows-layout bytes (w.row_bytes of them): how the
// paths without an interleaved kernel (row dots, generic dequantization) read interleaved rows.
void rows_layout_row(const WeightMatrix& w, int64_t row, uint8_t* out);

}  // namespace ember::cpu
