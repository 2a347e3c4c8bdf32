// The AVX-512 bf16 matmul (vdpbf16ps) behind avx512::matmul_prepared; see the .cpp for the
// prepared activation layout and the numerics.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu::avx512 {

// prepared_activation_floats / prepare_activations / matmul_prepared for bf16 weights.
int64_t bf16_prepared_floats(int64_t T, int64_t K);
void bf16_prepare(const float* x, int64_t T, int64_t K, int64_t token_begin, int64_t token_end,
                  float* xp);
void bf16_matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                          int64_t row_begin, int64_t row_end);

// Prefill (T >= 16) of prepared activations P pairs per token through f32 FMAs
// (avx512_matmul_bf16_fma.cpp), which bf16_matmul_prepared takes where bf16_prefill_uses_fma():
// on Intel CPUs, whose vdpbf16ps does half the flops a cycle of their FMAs.
bool bf16_prefill_uses_fma();
void bf16_gemm_fma(const uint32_t* xg, int64_t P, int64_t T, const WeightMatrix& w, float* y,
                   int64_t ldy, int64_t row_begin, int64_t row_end);

}  // namespace ember::cpu::avx512
