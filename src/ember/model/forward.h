// The one forward path of ember. A step takes a flat batch of T tokens drawn from any number of
// sequences (whole prompts, prompt chunks, single decode tokens): every op treats T as a batch
// dimension except attention, which reads each sequence's K/V through its block table. Each
// token's K and V are written into the paged cache at its position before attention runs, so a
// token attends to its sequence's positions [0, position].
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ember/core/aligned_vector.h"
#include "ember/core/thread_pool.h"
#include "ember/kv/kv_block_pool.h"
#include "ember/model/weights.h"

namespace ember {

// One sequence's share of a step: its n_tokens new tokens sit contiguously in StepInput::tokens
// and take positions [start_position, start_position + n_tokens).
struct SequenceSlice {
  const int32_t* block_table = nullptr;  // must already cover start_position + n_tokens
  int64_t start_position = 0;
  int64_t n_tokens = 0;
};

struct StepInput {
  std::vector<int32_t> tokens;           // [T], sequence after sequence
  std::vector<SequenceSlice> sequences;  // in the same order as their tokens
  std::vector<int32_t> logit_rows;       // flat token indices whose logits are wanted
};

class ForwardPass {
 public:
  ForwardPass(const ModelWeights& weights, KvBlockPool& kv_pool, ThreadPool& threads);

  // Runs the step; returns logits [logit_rows.size(), vocab] (valid until the next call).
  // Throws ember::Error for a token id outside the vocabulary or an inconsistent batch.
  const std::vector<float>& step(const StepInput& input);

 private:
  // y[:, 0:sum(N_i)] for several matrices sharing one input, split by rows over the pool.
  void matmul_parallel(const float* x, int64_t T,
                       std::initializer_list<const cpu::WeightMatrix*> ws,
                       std::initializer_list<float*> ys);
  void attention_block(int64_t layer, const LayerWeights& lw, int64_t T);
  // fn(t0, t1) over token rows [0, T): split across the threads when T is large enough for the
  // hand-off to pay (prefill), inline for a few tokens (decode). Row results never depend on it.
  template <typename Fn>
  void for_token_rows(int64_t T, Fn&& fn, int64_t grain = 4) {
    constexpr int64_t kMinParallelRows = 16;
    if (T < kMinParallelRows) {
      fn(int64_t{0}, T);
      return;
    }
    threads_.parallel_for(
        T, [&](int64_t b, int64_t e, int) { fn(b, e); }, grain);
  }
  void mlp_block(const LayerWeights& lw, int64_t T);

  const ModelWeights& weights_;
  KvBlockPool& kv_pool_;
  ThreadPool& threads_;

  // Per-step scratch, grown as needed: x/xn/tmp [T, d_model], q/attn [T, q_dim],
  // k/v [T, kv_dim], gate/up [T, d_ffn].
  AlignedVector<float> x_, xn_, tmp_, q_, k_, v_, attn_, gate_, up_;
  std::vector<int32_t> positions_;               // [T]
  std::vector<const SequenceSlice*> token_seq_;  // [T]
  // Attention work: (first token, token count) runs of consecutive tokens of one sequence.
  std::vector<std::pair<int64_t, int64_t>> attention_tiles_;
  std::vector<float> final_rows_, logits_;
  AlignedVector<cpu::BlockQ8Act> x_q8_;  // q8_0/q4_0 matmul input (see uses_8bit_activations)
  AlignedVector<float> x_bf16_;          // bf16 matmul input in the kernels' layout
  AlignedVector<float> x_float_;  // f32/f16 (and q8_0/q4_0 GEMM) input in the kernels' layout
};

}  // namespace ember
