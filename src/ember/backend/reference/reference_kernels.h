// The reference backend's kernels: plain scalar code accumulating in double, the simplest correct
// version of every op. They are the oracle: the reference backend runs whole models on them, and
// the tests hold every cpu kernel (each ISA) to them. They read weights and the paged KV cache in
// the host layouts the cpu backend defines (cpu/kernels.h, cpu/weight_layout.h), so one oracle
// checks every layout the cpu backend makes.
#pragma once

#include "ember/backend/cpu/kernels.h"

namespace ember::reference {

using cpu::BlockQ8Act;
using cpu::PagedKv;

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
// Gathers K/V into contiguous arrays, computes softmax over the window of scores(q·K^T)·V in
// double (attention_scores.h: scale, soft-cap, sliding window).
void attention(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
               int64_t ctx_len, const AttentionScores& scores, float* out);

}  // namespace ember::reference
