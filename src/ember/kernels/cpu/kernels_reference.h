// Plain scalar references of every kernel in kernels.h: the simplest correct code, used only by
// tests (and as the forced `scalar` ISA fallback's ground truth). Same signatures, namespace ref.
#pragma once

#include "ember/kernels/cpu/kernels.h"

namespace ember::cpu::ref {

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);
void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out);
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end);
void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps);
void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq);
void softmax(float* x, int64_t n);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void dequantize_row(const WeightMatrix& table, int64_t row, float* out);
// Gathers K/V into contiguous arrays, computes full softmax(q·K^T * scale)·V in double.
void attention(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
               int64_t ctx_len, float scale, float* out);

}  // namespace ember::cpu::ref
