// The Llama family's forward pass (Llama 1-3, SmolLM2, Qwen2 with its QKV biases, stories*),
// written once against the backend's ops: it never sees a SIMD type, a thread or a storage layout.
// A step runs a flat Batch of T tokens from any number of sequences (whole prompts, prompt chunks,
// single decode tokens): each token's K and V go into the paged cache at its position before
// attention runs, so a token attends to its sequence's positions [0, position].
//   block = RMSNorm -> Q,K,V (+bias) -> RoPE -> store K,V -> attention -> W_O -> +residual
//           RMSNorm -> gate, up -> SiLU(gate) * up -> down -> +residual
#pragma once

#include <span>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/model/weights.h"

namespace ember {

class LlamaModel {
 public:
  explicit LlamaModel(const ModelWeights& weights);

  // Runs the step (batch must be finalized); returns logits [logit_rows.size(), vocab] in host
  // memory, valid until the next call. Throws ember::Error for a token id outside the vocabulary.
  std::span<const float> forward(const Batch& batch, KvStorage& kv);

 private:
  void attention_block(int64_t layer, const LayerWeights& lw, const Batch& batch, KvStorage& kv);
  void mlp_block(const LayerWeights& lw, int64_t T);

  const ModelWeights& weights_;
  Backend& backend_;
  // Per-step activations in the backend's memory, grown as needed: x/xn/tmp [T, d_model],
  // q/attn [T, q_dim], k/v [T, kv_dim], gate/up [T, d_ffn]; final [R, d_model], logits [R, vocab].
  Activations x_, xn_, tmp_, q_, k_, v_, attn_, gate_, up_, final_, logits_;
  std::vector<float> host_logits_;  // staging when the backend's memory is not host memory
};

}  // namespace ember
