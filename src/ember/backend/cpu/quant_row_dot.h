// Matmuls of the block types beyond q8_0/q4_0 (core/quant_blocks.h: q4_1, q5_0, q5_1, q8_1, the
// K-quants, iq4_nl, iq4_xs) against 8-bit activations (BlockQ8Act, blocks of 32), one output at
// a time: a row dot multiplies one weight row of K values by one token's K / 32 activation blocks.
// Each ISA provides a row dot per type (one file per weight family: avx2_matmul_legacy_quants.cpp,
// avx2_matmul_kquants.cpp, avx2_matmul_iquants.cpp); the scalar one (quant_row_dot_scalar.cpp)
// dequantizes the row exactly and is what the others are tested against.
//
// Determinism: y[t, n] depends only on row n and token t's activations, never on T, the row range
// or the thread.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu {

// sum_k W[row, k] * x[k], x as K / 32 activation blocks.
using QuantRowDot = float (*)(const uint8_t* row, const BlockQ8Act* x, int64_t K);

// Four rows at once (row i at row + i * row_bytes) times one token: y[0..3], each the same bits
// as the single-row dot of its row. Sharing the activation loads and scales across the rows.
using QuantRowDot4 = void (*)(const uint8_t* row, int64_t row_bytes, const BlockQ8Act* x, int64_t K,
                              float* y);

// Rows [row_begin, row_end) x T tokens through `dot` (and `dot4`, when not null, for whole groups
// of four rows): y[t * ldy + n].
void matmul_q8_row_dots(QuantRowDot dot, QuantRowDot4 dot4, const BlockQ8Act* xq, int64_t T,
                        const WeightMatrix& w, float* y, int64_t ldy, int64_t row_begin,
                        int64_t row_end);

namespace scalar {
// The exact dot (weights dequantized as their format defines, double accumulation) for every
// quantized dtype except the interleaved layouts.
float quant_row_dot_exact(DType dtype, const uint8_t* row, const BlockQ8Act* x, int64_t K);
// The scalar path's row dot for `dtype` (the exact one, per type).
QuantRowDot quant_row_dot(DType dtype);
}  // namespace scalar

namespace avx2 {
// The AVX2 row dot for `dtype`, or nullptr where there is none (the scalar one runs instead).
QuantRowDot quant_row_dot(DType dtype);
// The four-row version where a type has one (nullptr otherwise).
QuantRowDot4 quant_row_dot4(DType dtype);
// `rows` rows of K values of a Rows-layout matrix of `dtype` (row i at base + i * row_bytes) as
// exact f32, row i at out + i * ldo: the panels of the prefill GEMM and embedding lookups.
void dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                     float* out, int64_t ldo);

// One entry per weight family file; each returns nullptr / false for the types it does not take.
QuantRowDot legacy_quant_row_dot(DType dtype);  // q4_1 q5_0 q5_1 q8_1 (avx2_matmul_legacy_quants)
QuantRowDot kquant_row_dot(DType dtype);        // q2_k .. q6_k (avx2_matmul_kquants)
QuantRowDot4 kquant_row_dot4(DType dtype);
QuantRowDot iquant_row_dot(DType dtype);  // iq4_nl iq4_xs (avx2_matmul_iquants)
bool legacy_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo);
bool kquant_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo);
bool iquant_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo);
}  // namespace avx2

}  // namespace ember::cpu
