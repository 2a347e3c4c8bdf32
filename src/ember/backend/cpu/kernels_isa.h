// Internal to the CPU backend: the per-ISA implementations behind the dispatcher in kernels.cpp.
// Each ISA provides every kernel of kernels.h with the same signature in its own namespace; the
// dispatcher picks one table at run time. Not part of the public interface.
#pragma once

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu {

// One function pointer per kernel of kernels.h.
struct KernelTable {
  Isa isa;
  void (*matmul)(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                 int64_t row_begin, int64_t row_end);
  void (*rmsnorm)(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps);
  void (*rope)(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
               const int32_t* positions, const float* inv_freq);
  void (*softmax)(float* x, int64_t n);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*gelu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*add_inplace)(float* y, const float* x, int64_t n);
  void (*store_kv)(const float* x, int64_t n, DType dtype, void* out);
  void (*dequantize_row)(const WeightMatrix& table, int64_t row, float* out);
  void (*attention_tokens)(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                           const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                           const AttentionScores& scores, float* out, int64_t out_stride,
                           int64_t kv_head_begin, int64_t kv_head_end);
  void (*attention_segment)(const float* q, int64_t n_heads, const PagedKv& kv,
                            const int32_t* block_table, int64_t ctx_len,
                            const AttentionScores& scores, int64_t kv_head_begin,
                            int64_t kv_head_end, int64_t segment, float* partial);
  void (*quantize_activations)(const float* x, int64_t T, int64_t K, BlockQ8Act* out);
  void (*matmul_q8)(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                    int64_t row_begin, int64_t row_end);
  int64_t (*prepared_activation_floats)(DType dtype, int64_t T, int64_t K);
  void (*prepare_activations)(DType dtype, const float* x, int64_t T, int64_t K,
                              int64_t token_begin, int64_t token_end, float* xp);
  void (*matmul_prepared)(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                          int64_t row_begin, int64_t row_end);
};

namespace scalar {
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);
void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps);
void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq);
void softmax(float* x, int64_t n);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);
void store_kv(const float* x, int64_t n, DType dtype, void* out);
void dequantize_row(const WeightMatrix& table, int64_t row, float* out);
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end);
void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment, float* partial);
void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out);
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K);
void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp);
void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end);
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end);
}  // namespace scalar

// Compiled with function-level target("avx2,fma,f16c"); call only when the CPU has all three.
namespace avx2 {
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);
void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps);
void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq);
void softmax(float* x, int64_t n);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);
void store_kv(const float* x, int64_t n, DType dtype, void* out);
void dequantize_row(const WeightMatrix& table, int64_t row, float* out);
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end);
void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment, float* partial);
void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out);
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K);
void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp);
void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end);
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end);
}  // namespace avx2

// Compiled with function-level target(EMBER_AVX512_TARGET: AVX-512 F/BW/VL/DQ, BF16, VNNI); call
// only when the CPU has all of them. The kernels not listed here are the AVX2 ones.
namespace avx512 {
// avx2's attention walk with its softmax steps on 512-bit vectors, bit for bit the AVX2 results
// (attention_step.h).
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end);
void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment, float* partial);
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K);
void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp);
void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end);
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end);
}  // namespace avx512

// The AMX set (amx_kernels.h): AVX-512 plus tiles, after amx_available() (amx_support.h); its
// elementwise kernels on 512-bit vectors (amx_ops.cpp), bit for bit the AVX2 ones.
namespace amx {
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);
}  // namespace amx

}  // namespace ember::cpu
