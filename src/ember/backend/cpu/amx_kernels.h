// The AMX kernel set (Isa::Amx): matmuls of 16 or more tokens on AMX-BF16 tiles (TDPBF16PS) for
// bf16 weights and for q8_0 / q4_0 weights (their Interleaved8 blocks widened to bf16 tiles once
// per 16-row block and step, amx_panels.cpp), bf16 decode on the AmxTiles layout with AVX-512
// BF16, prefill attention on tiles (amx_attention.cpp), and every other kernel from the AVX-512
// set. Internal to the CPU backend.
//
// Numerics: A (the activations) is rounded to bf16 once, as the AVX-512 bf16 kernels do; q8_0 /
// q4_0 weights d * q are exact in f32 and rounded to bf16 in the panel (relative error <= 2^-9,
// the same as the activations'), so those matmuls take bf16 activations, not 8-bit ones, from 16
// tokens on: their error bound is the bf16 one, 2^-8 * sum |x w|.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu::amx {

// From this many tokens a matmul on a supported weight runs on the tiles.
constexpr int64_t kAmxMinTokens = 16;

// Whether a matmul of T tokens on w runs on AMX tiles (bf16 in either layout, q8_0 / q4_0 in
// Interleaved8, T >= kAmxMinTokens).
bool runs_on_tiles(const WeightMatrix& w, int64_t T);

MatmulInput matmul_input(const WeightMatrix& w, int64_t T);
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K);
void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp);
void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end);
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);

// The tile GEMM: xp [ceil(T / 16) * 16][K32 / 2] bf16 pairs (amx prepared layout), rows
// [row_begin, row_end) of w (see runs_on_tiles).
void tiles_gemm(const uint32_t* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end);
// Decode (T < kAmxMinTokens) on an AmxTiles matrix with AVX-512 BF16: xp as above.
void tiles_gemv(const uint32_t* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end);
// Prefill attention (amx_attention.cpp): attention_tokens() of kernels.h on AMX tiles for tiles of
// 16 or more tokens over a cache narrower than f32 (no soft-cap, head_dim % 32 == 0); anything
// else goes to the AVX2 kernel.
bool attention_runs_on_tiles(const PagedKv& kv, const AttentionScores& rules, int64_t nt);
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& rules, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end);

// One 64-row block of a q8_0 / q4_0 Interleaved8 matrix in the AmxTiles layout (amx_weight_tiles.h)
// into out (amx_block_bytes(K) bytes).
void widen_block_to_tiles(const WeightMatrix& w, int64_t block, uint8_t* out);

}  // namespace ember::cpu::amx
