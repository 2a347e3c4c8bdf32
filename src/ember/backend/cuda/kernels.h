// Launchers of the CUDA backend's kernels (the .cu files), callable from host C++. Every pointer is
// device memory; every launcher enqueues on `stream` and returns at once. Shapes follow the ops of
// backend/backend.h; matrices arrive as the backend uploaded them (weight.h: Rows, or
// QuantsThenScales for q8_0/q4_0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "ember/backend/attention_scores.h"
#include "ember/backend/cuda/device_batch.h"
#include "ember/backend/weight.h"

namespace ember::cuda {

// One layer's K and V in device memory, each [n_blocks, n_kv_heads, block_size, head_dim] in
// `dtype` (F32 or F16) — the host backends' paged layout.
struct DeviceKvLayer {
  void* k = nullptr;
  void* v = nullptr;
  bool f16 = false;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
};

// The GGML block types the backend keeps as stored and decodes in-kernel, 32 values at a time
// (block_dequant.cuh); q8_0/q4_0 have a layout of their own (QuantsThenScales).
constexpr bool is_group_dtype(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

// --- elementwise and row ops (kernels_rows.cu) ---
void launch_embed(const WeightMatrix& table, DeviceTokens b, float* x, cudaStream_t s);
void launch_add_position_embeddings(const WeightMatrix& table, DeviceTokens b, float* x,
                                    cudaStream_t s);
void launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps,
                    cudaStream_t s);
void launch_layernorm(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                      int64_t D, float eps, cudaStream_t s);
void launch_add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s);
void launch_scale(float* x, float scale, int64_t n, cudaStream_t s);
void launch_softcap(float* x, float cap, int64_t n, cudaStream_t s);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t s);
void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
// up may be null (GELU alone).
void launch_gelu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
void launch_gather_rows(const float* x, int64_t D, const int32_t* rows, int64_t n_rows, float* out,
                        cudaStream_t s);
// y[rows[r]] += scales[r] * x[r], r in order (a row may repeat): x [n_rows, D], y [*, D].
void launch_scatter_add_rows(const float* x, int64_t D, const int32_t* rows, const float* scales,
                             int64_t n_rows, float* y, cudaStream_t s);

// --- RoPE and the KV cache (kernels_kv.cu) ---
// x [T, n_heads, head_dim] in place; HF half-rotation pairing within rope_dim.
void launch_rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                 const float* inv_freq, DeviceTokens b, cudaStream_t s);
// k, v [T, n_kv_heads * head_dim] into their slots.
void launch_store_kv(const DeviceKvLayer& kv, const float* k, const float* v, DeviceTokens b,
                     DeviceTables tables, cudaStream_t s);

// launch_rope on q [T, n_heads, hd] and k [T, n_kv_heads, hd], then launch_store_kv: one launch.
// head_dim <= 1024 (one thread per element).
void launch_rope_store_kv(const DeviceKvLayer& kv, float* q, float* k, const float* v,
                          int64_t n_heads, int64_t rope_dim, const float* inv_freq, DeviceTokens b,
                          DeviceTables tables, cudaStream_t s);

// --- attention (kernels_attention.cu) ---
// q/out [T, n_heads * head_dim]; each token over its sequence's [first_key, position]. One block
// per (token, head or GQA group, split) for the n_list tokens of token_list (null: all T): decode
// and short chunks. splits > 1 (split-K over long contexts): `partial` holds
// attention_partial_floats(n_list, n_heads, head_dim, splits) floats of scratch.
void launch_attention(const DeviceKvLayer& kv, const float* q, int64_t n_heads,
                      const AttentionScores& scores, DeviceTokens b, DeviceTables tables,
                      const int32_t* token_list, int64_t n_list, float* out, int64_t splits,
                      float* partial, bool group_heads, cudaStream_t s);
// Blocks per token (and split) launch_attention uses for n_list tokens: the KV heads where
// group_heads is set, the kernel takes the shape (head_dim 64 or 128, 2, 3, 4 or 8 query heads per
// KV head: a block reads each K and V row once for its whole group) and the (token, KV head)
// pairs are many enough; else the query heads.
int64_t attention_block_heads(const DeviceKvLayer& kv, int64_t n_heads, int64_t n_list,
                              bool group_heads);
// The split count for n_list tokens of n_heads heads whose longest context is longest_context
// keys: 1 (no split) where the (token, head) pairs already fill the GPU or contexts are short;
// a power of two otherwise, so that a decode step's graph changes only when the bucket does.
int64_t attention_splits(int64_t n_list, int64_t n_heads, int64_t longest_context, int sm_count);
inline int64_t attention_partial_floats(int64_t n_list, int64_t n_heads, int64_t head_dim,
                                        int64_t splits) {
  return n_list * n_heads * splits * (head_dim + 2);
}
// Prefill chunks on the tensor cores (kernels_attention_tiles.cu): tiles [n_tiles, 2] of (first
// token, count <= kAttentionTileQueries), each within one sequence. head_dim 64 or 128 only.
inline constexpr int64_t kAttentionTileQueries = 64;
bool attention_tiles_support(int64_t head_dim);
void launch_attention_tiles(const DeviceKvLayer& kv, const float* q, int64_t n_heads,
                            const AttentionScores& scores, DeviceTokens b, DeviceTables tables,
                            const int32_t* tiles, int64_t n_tiles, float* out, cudaStream_t s);

// --- matrix products (kernels_matvec.cu, kernels_convert.cu) ---
// Tokens up to which matvec() runs (weights read once for all of them, activations in f32);
// above it the backend converts and calls cuBLAS.
inline constexpr int64_t kMatvecMaxTokens = 8;
// ys[i][t, n] = sum_k x[t, k] * ws[i][n, k]: x [T, K] f32, ys[i] [T, ws[i].n_rows];
// T <= kMatvecMaxTokens. Matrices of one dtype and K share a launch. With `residual` (one matrix
// only; it must not alias x) the kernel also adds the result into it: a residual add fused in.
// An RMSNorm folded into the matvec that reads its output: the kernel normalizes x [T, K] itself
// (x * 1/RMS(x) * weight, eps inside the root) and writes the normalized rows to `out` (non-null).
struct FoldedNorm {
  const float* weight = nullptr;  // [K], 16-byte aligned
  float eps = 0.0f;
  float* out = nullptr;  // [T, K]; must not alias x
};
// Whether launch_matvec can fold a norm into the product of x with ws (the vector kernels take
// every matrix: f32/f16/bf16 rows or q8_0/q4_0 QuantsThenScales, aligned).
bool matvec_folds_norm(const float* x, std::span<const WeightMatrix* const> ws);
// sm_count: the GPU's multiprocessors (how many rows a warp takes depends on how many warps the
// matrices give the GPU: matvec_rows_per_warp).
void launch_matvec(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                   std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                   int sm_count, cudaStream_t s);
// Rows of one matrix a warp of the matvec kernels takes (1, 2 or 4) for a launch of `rows` rows in
// all and `tokens` tokens, of quantized (q8_0/q4_0) or float weights, on a GPU of sm_count
// multiprocessors; set_matvec_rows_per_warp (cuda_backend.h) or EMBER_CUDA_MATVEC_ROWS forces it.
int matvec_rows_per_warp(int64_t rows, int64_t tokens, bool quantized, int sm_count);
// Whether each warp issues its first weight loads before waiting for the kernel before (the
// default; set_matvec_early_loads or EMBER_CUDA_MATVEC_EARLY=0 turns it off).
bool matvec_early_loads();
// f32 -> bf16 / f16 (for cuBLAS inputs), n elements.
void launch_f32_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t s);
void launch_f32_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t s);
// A q8_0 / q4_0 matrix in QuantsThenScales layout -> bf16 [n_rows, n_cols].
void launch_dequantize_to_bf16(const WeightMatrix& w, uint16_t* out, cudaStream_t s);

// --- device read bandwidth (kernels_probe.cu) ---
// Milliseconds one streaming read of `bytes` (a multiple of 16) takes; waits for it.
float time_read_probe(const void* data, int64_t bytes, uint32_t* sink, int sm_count,
                      cudaStream_t s);

}  // namespace ember::cuda
