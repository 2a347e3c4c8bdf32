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

// Decode (T < 16) through f32 FMAs (avx512_matmul_bf16_gemv_fma.cpp: the bits of the vdpbf16ps
// decode kernel), which the AVX-512 set takes where bf16_prefill_uses_fma(). Its activations are
// rounded to bf16 and widened back: [T][K rounded up to 32] floats, each 32-value chunk's even
// values then its odd ones, written for tokens [token_begin, token_end) by bf16_prepare_widened.
int64_t bf16_widened_floats(int64_t T, int64_t K);
void bf16_prepare_widened(const float* x, int64_t K, int64_t token_begin, int64_t token_end,
                          float* xw);
void bf16_gemv_fma(const float* xw, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                   int64_t row_begin, int64_t row_end);

}  // namespace ember::cpu::avx512
