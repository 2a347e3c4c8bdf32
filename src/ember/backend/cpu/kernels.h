// The CPU backend's kernels (used by cpu_backend.cpp only). Activations are float32; weights are in
// any DType. Every kernel here has a plain scalar reference (kernels_reference.h) it is tested
// against. Optimised paths are chosen at run time from CPUID (AMX / AVX-512 / AVX2 / scalar);
// EMBER_ISA=scalar|avx2|avx512|amx forces one (a forced ISA the CPU lacks falls back to the best
// available with a warning). AMX (amx_kernels.h) is AVX-512 plus matrix-unit tiles for matmuls of
// 16 or more tokens.
//
// Determinism contract: each output element's value depends only on its own inputs, never on which
// row range a call covers or on the thread that runs it. Float matmuls use one summation order
// below kGemmMinTokens tokens (the decode kernels) and another from there on (the prefill GEMM):
// within each range results do not depend on T, across them they differ by float reassociation
// only. Quantized weights in the Interleaved8 layout (what the loader makes) multiply 8-bit
// activations at every T with exact integer block dots: their results do not depend on T at all,
// so prefill and decode agree bit for bit. In the Rows layout (--no-interleave) they take 8-bit
// activations below kGemmMinTokens and f32 activations from there on, so the two ranges differ by
// the activation quantization error (~0.4%). Attention does not depend on T.
#pragma once

#include <cstdint>

#include "ember/backend/attention_scores.h"
#include "ember/backend/weight.h"
#include "ember/core/dtype.h"

namespace ember::cpu {

enum class Isa : uint8_t { Scalar, Avx2, Avx512, Amx };
const char* isa_name(Isa isa);
Isa active_isa();         // what the dispatcher uses now
void force_isa(Isa isa);  // for tests and the EMBER_ISA variable

// The backend's weight type (backend/weight.h), under the names the kernels have always used.
using WeightLayout = ember::WeightLayout;
using WeightMatrix = ember::WeightMatrix;

// From this many tokens in one call, matmuls run as a GEMM that reuses every weight across the
// tokens: float weights with the tokens in the SIMD lanes, quantized weights dequantized to f32
// (exact) and multiplied like f32 weights against f32 activations.
constexpr int64_t kGemmMinTokens = 16;

// Whether a matmul of T tokens on w takes 8-bit activations (BlockQ8Act): quantized weights, always
// when interleaved (the integer tiles there beat the f32 GEMM on dequantized panels by ~1.4x at
// any T), below kGemmMinTokens otherwise.
inline bool uses_8bit_activations(const WeightMatrix& w, int64_t T) {
  return dtype_is_quantized(w.dtype) &&
         (w.layout == WeightLayout::Interleaved8 || T < kGemmMinTokens);
}

// The input a matmul of T tokens on w reads under the active kernel set: 8-bit activations
// (quantize_activations, matmul_q8), or activations prepared (prepare_activations) for bf16
// weights or for f32 ones. Outside the AMX set: Q8 when uses_8bit_activations, else Bf16 for bf16
// weights and F32 for the rest. The AMX set multiplies q8_0 / q4_0 by bf16 activations on its
// tiles from 16 tokens on (amx_kernels.h).
enum class MatmulInput : uint8_t { Q8, Bf16, F32 };
MatmulInput matmul_input(const WeightMatrix& w, int64_t T);

// Whether a matmul of T tokens on w runs on matrix units (AMX tiles). Such a matmul wants each
// thread to take all T tokens of a range of rows: a weight block is loaded (or widened from q8_0 /
// q4_0) once for all the tokens, where token groups would have every thread read every block.
bool matmul_runs_on_tiles(const WeightMatrix& w, int64_t T);

// Activations quantized to 8 bits per block of 32, as the quantized-weight matmuls consume them
// (see uses_8bit_activations): value = d * qs[i], d = max|x| / 127, qs = round(x / d). Quantized
// weights (q8_0, q4_0) are multiplied against these with integer dot products per block, so a
// token's result does not depend on how many tokens share the step. (In the Rows layout,
// compute-bound prefill instead expands the weights to f32 once per panel: its row-by-row integer
// tiles pay a per-block scaling for every token.)
struct BlockQ8Act {
  float d;
  int32_t sum;  // sum of qs (the q4_0 kernels subtract 8 * sum for the nibble offset)
  int8_t qs[32];
};

// x [T, K] (K a multiple of 32) -> out [T, K / 32].
void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out);

// Like matmul() for q8_0 / q4_0 weights, with activations already quantized (so several
// matrices sharing one input quantize it once): y[t, n] = sum_b d_w * d_x * sum_i qw_i * qx_i.
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end);

// y[t, n] = sum_k x[t, k] * W[n, k] for t in [0, T), n in [row_begin, row_end). When
// uses_8bit_activations(w, T) x is first quantized to BlockQ8Act (see above) and matmul_q8 runs;
// otherwise quantized W is dequantized to f32 and x is used as it is.
// x: [T, K] f32, leading dimension K; y: [T, N] f32, leading dimension ldy (>= N).
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end);

// Float-weight matmuls (f32, f16, bf16) may read their activations in a layout of their own (the
// AVX2 kernels: bf16 inputs de-interleaved per 16 values; for T >= 16, 16 tokens side by side for
// every k). A caller that splits one matmul over threads, or multiplies one input by several
// matrices, prepares the input once: xp holds prepared_activation_floats(dtype, T, K) floats;
// prepare_activations() fills the part for tokens [token_begin, token_end) (token_begin a multiple
// of kPreparedTokenGrain, so threads can split the work), and matmul_prepared(xp, ...) on a matrix
// of that dtype equals matmul(x, ...) bit for bit. f32, f16, q8_0 and q4_0 share one layout (for
// quantized weights taking 8-bit activations it is x itself, quantized inside the call).
constexpr int64_t kPreparedTokenGrain = 16;
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K);
void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp);
void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, x/y: [T, D] (may alias).
void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps);

// Rotary embedding, HF half-rotation layout: within each head, element i pairs with i + rope_dim/2
// for i < rope_dim/2; angle = position * inv_freq[i]. x: [T, n_heads, head_dim] in place.
void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq);

// x[i] = exp(x[i] - max) / sum, in place.
void softmax(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu(gate[i]) * up[i] (up may be null: gelu alone), GELU's tanh form, computed as
// g / (1 + exp(-2u)) with u = sqrt(2/pi) (g + 0.044715 g^3) (= 0.5 g (1 + tanh u)).
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);

// y[t] = (x[t] - mean) / sqrt(var + eps) * weight + bias, x/y: [T, D] (may alias).
void layernorm(const float* x, const float* weight, const float* bias, float* y, int64_t T,
               int64_t D, float eps);

// x[i] = cap * tanh(x[i] / cap).
void softcap(float* x, float cap, int64_t n);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n);

// x [n] f32 into a KV cache row of `dtype` at out (kv_row_format.h): F32 copies, F16/BF16 round to
// nearest even, Q8_0/Q4_0 quantize (the AVX2 path and the scalar one give the same bits).
void store_kv(const float* x, int64_t n, DType dtype, void* out);

// Row `row` of an embedding table in any dtype, converted to f32 into out[0, n_cols).
void dequantize_row(const WeightMatrix& table, int64_t row, float* out);

// Paged KV cache as attention reads it: per layer, a pool of blocks, each holding n_kv_heads x
// block_size tokens x one row (head_dim values) for K, and likewise for V, rows in the formats of
// kv_row_format.h (f32, f16, bf16, q8_0, q4_0; K and V may differ):
//   row (block, slot, kv_head) at k_pool + row_index(block, slot, kv_head) * k_row_bytes
// Head-major within a block, so the rows one kv head reads from a block are one contiguous run
// (4 KiB for SmolLM2 in f32) that the hardware prefetcher streams, and a call over several kv
// heads, which walks them block by block together, reads the block's rows of all of them as one
// longer run (a run costs about one memory latency whatever its length: README, KV cache).
// A narrower cache cuts the bytes attention streams per step; every reader widens the stored
// values exactly (to f32), so the rounding happens once, when store_kv writes them.
struct PagedKv {
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  DType k_dtype = DType::F32;
  DType v_dtype = DType::F32;
  int64_t k_row_bytes = 0;
  int64_t v_row_bytes = 0;
  bool k_rotated = false;  // K rows hold H k (kv_rotate): queries must be rotated before the call
  // Per-channel K (kv_channel_blocks.h): the k_pool region of (block, kv head) is
  // k_region(block, kv_head), and a query reads the block holding its own position from the exact
  // rows instead: k_exact[block] (f16 [n_layers, n_kv_heads, block_size, head_dim], this layer at
  // k_exact_offset) while HostKvStorage keeps them, which it does for every block a step writes.
  bool k_channel = false;
  const uint16_t* const* k_exact = nullptr;
  int64_t k_exact_offset = 0;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  // Row index of (block, slot, kv head): multiply by the row bytes for its address.
  int64_t row_index(int64_t block, int64_t slot, int64_t kv_head) const {
    return (block * n_kv_heads + kv_head) * block_size + slot;
  }
  const uint8_t* k_row(int64_t index) const {
    return static_cast<const uint8_t*>(k_pool) + index * k_row_bytes;
  }
  const uint8_t* v_row(int64_t index) const {
    return static_cast<const uint8_t*>(v_pool) + index * v_row_bytes;
  }
  const uint8_t* k_region(int64_t block, int64_t kv_head) const {
    return k_row(row_index(block, 0, kv_head));
  }
  // The exact K rows [block_size, head_dim] (f16) of (block, kv head); k_channel only.
  const uint16_t* k_exact_rows(int64_t block, int64_t kv_head) const {
    return k_exact[block] + k_exact_offset + kv_head * block_size * head_dim;
  }
  // Key `pos` of kv head g (block table entry `block`) as f32 into out [head_dim], for a query at
  // position `query_pos`: from the pool in the cache's dtype, or, per-channel K, from the exact
  // rows when the key shares the query's block and from the sealed region otherwise. Returns the
  // row.
  const float* read_k(int64_t block, int64_t pos, int64_t query_pos, int64_t kv_head,
                      float* out) const;
};

// Causal attention of one query token over context positions [0, ctx_len) of its sequence, read
// through `block_table` (block_table[p / block_size] holds position p). q: [n_heads, head_dim];
// out: [n_heads, head_dim]. Query head h uses kv head h / (n_heads / n_kv_heads) (GQA). Streams
// K/V blocks with an online softmax; `scale` is usually 1/sqrt(head_dim).
void attention(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
               int64_t ctx_len, const AttentionScores& scores, float* out);

// attention() for only the query heads that share kv heads [kv_head_begin, kv_head_end) (q and out
// still span all n_heads; other heads' outputs are left alone), so one token's heads can be split
// across threads. Each head's output is the same bits as in the whole call.
void attention_kv_heads(const float* q, int64_t n_heads, const PagedKv& kv,
                        const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                        float* out, int64_t kv_head_begin, int64_t kv_head_end);

// attention_kv_heads() for nt consecutive query tokens of ONE sequence: token u's heads at
// q + u * q_stride, its output at out + u * out_stride, its context [0, ctx0 + u) (causal
// prefill). Every token's output is the same bits as its own single-token call; sharing the call
// lets the tokens read each K/V block from memory once.
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end);

// Keys per online-softmax step of the AVX2 / AVX-512 walk (avx2_attention.cpp): whole blocks, at
// least this many. Segments (below) are whole steps.
inline constexpr int64_t kAttentionStepMinKeys = 128;

// Long contexts are attended in segments of attention_segment_keys(block_size) keys (about 1,024:
// whole softmax steps of every kernel), each with an online softmax of its own, folded in order
// (fold_attention_state). attention_tokens() walks a token's segments one after another;
// attention_segment() computes one segment's state alone, so a caller can spread one token's
// segments over threads ("flash decoding": a batch-1 decode step has only n_kv_heads items
// otherwise) and fold them itself. Either way each output has the same bits.
int64_t attention_segment_keys(int64_t block_size);

// Folds one segment's state of a query head into the running one: acc [hd] unnormalised, max m,
// denominator l (m = -inf: no key seen yet). A segment that saw no key changes nothing; folded into
// an empty state it is copied exactly. The one definition every kernel and caller uses.
void fold_attention_state(float* acc, float* m, float* l, const float* segment_acc, float segment_m,
                          float segment_l, int64_t hd);

// The query heads of kv heads [kv_head_begin, kv_head_end) of ONE token (context [0, ctx_len))
// over the keys of segment `segment` only ([segment * S, segment * S + S), S =
// attention_segment_keys): their unnormalised states into partial [heads][hd + 2] (acc, then m,
// then l; heads = (kv_head_end - kv_head_begin) * n_heads / n_kv_heads, in query head order). The
// output of a head is then fold_attention_state over its segments in order, times 1 / l (0 when l
// is 0). Several kv heads in one call read each block's rows of all of them as one run.
void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment, float* partial);

// How many consecutive tokens of one sequence a caller should give attention_tokens() together:
// 8 (the AVX2 kernel reads each K/V block once for all of them), 32 under the AMX set (whose tile
// kernel runs tiles of 16 or more tokens; amx_kernels.h). Results of the AVX2 kernel do not depend
// on it; the AMX tile kernel rounds Q, K, V and the probabilities to bf16.
int64_t attention_tile_tokens();

// A hint: requests the K and V rows of the first kPrefetchContextKeys positions (those below
// ctx_len) of kv head `kv_head` into cache (L2), so that an attention call about to start on them
// does not begin on cold misses (its blocks sit anywhere in the pool). No effect on results.
constexpr int64_t kPrefetchContextKeys = 64;
void prefetch_kv_context(const PagedKv& kv, const int32_t* block_table, int64_t ctx_len,
                         int64_t kv_head);

}  // namespace ember::cpu
