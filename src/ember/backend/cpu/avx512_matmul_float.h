// AVX-512 decode matmul for f32 / f16 weights (avx512_matmul_float.cpp).
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu::avx512 {

// y[t, n] for T < kGemmMinTokens tokens of x ([T, K] f32 rows, as prepared for f32/f16) and rows
// [row_begin, row_end) of an f32 or f16 matrix (an empty range writes nothing).
void float_gemv(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end);

}  // namespace ember::cpu::avx512
