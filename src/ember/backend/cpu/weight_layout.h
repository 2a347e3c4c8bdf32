// The Interleaved8 layout of q8_0 / q4_0 matrices (WeightLayout in kernels.h), made once at load.
//
// Rows are taken in groups of 8 (the last group zero-padded). For each block index b a group
// stores the 8 rows' blocks side by side: their 8 f16 scales, then their quants interleaved 4 bytes
// at a time, so one 32-byte load holds the same 4 consecutive bytes of all 8 rows, one row per
// 32-bit lane. A decode kernel multiplies that against 4 activation bytes broadcast to every lane
// and gets 8 rows' partial dot products in one vector: no horizontal sums, one scale conversion per
// 8 rows instead of per row (see avx2_matmul_interleaved.cpp). The bytes per block are unchanged:
// group g occupies exactly the span of rows 8g..8g+7 in the Rows layout.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"
#include "ember/core/dtype.h"

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

// The dtypes that have an Interleaved8 layout: q8_0 and q4_0.
inline bool has_interleaved_layout(DType dtype) {
  return dtype == DType::Q8_0 || dtype == DType::Q4_0;
}

// Bytes a matrix of this shape takes in `layout` (Interleaved8: whole groups of 8 rows).
int64_t weight_matrix_bytes(DType dtype, int64_t n_rows, int64_t n_cols, WeightLayout layout);

// Rewrites a Rows-layout q8_0/q4_0 matrix as Interleaved8 into dst, which holds
// weight_matrix_bytes(..., Interleaved8) bytes; dst may be src.data itself when that buffer is this
// large (each group is read before its span is written). Returns the view of dst.
WeightMatrix interleave_rows(const WeightMatrix& src, void* dst);

// The start of the 8-row group holding `row`, and block b of that group.
inline const uint8_t* interleaved_group(const WeightMatrix& w, int64_t row) {
  return static_cast<const uint8_t*>(w.data) +
         row / kInterleavedRows * kInterleavedRows * w.row_bytes;
}

// Block b of `row` of a q4_0 / q8_0 matrix in either layout, as the plain block.
BlockQ4_0 q4_0_block(const WeightMatrix& w, int64_t row, int64_t b);
BlockQ8_0 q8_0_block(const WeightMatrix& w, int64_t row, int64_t b);

}  // namespace ember::cpu
