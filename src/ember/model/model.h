// A model's forward pass, one class per family (llama.cpp, gemma.cpp, gpt2.cpp), each written
// once against the backend's ops: it never sees a SIMD type, a thread or a storage layout.
// A step runs a flat Batch of T tokens from any number of sequences (whole prompts, prompt
// chunks, single decode tokens): each token's K and V go into the paged cache at its position
// before attention runs, so a token attends to its sequence's positions [0, position] (or the
// last `window` of them on a sliding-window layer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ember/backend/backend.h"
#include "ember/backend/kv_cache.h"
#include "ember/model/forward_observer.h"
#include "ember/model/weights.h"

namespace ember {

class Model {
 public:
  virtual ~Model() = default;
  // Runs the step (batch must be finalized); returns logits [logit_rows.size(), vocab] in host
  // memory, valid until the next call. Throws ember::Error for a token id outside the vocabulary
  // (or, with learned positions, a position past the table).
  virtual std::span<const float> forward(const Batch& batch, KvCache& kv) = 0;
  // Mixture-of-experts models: tokens routed to each expert so far, [n_layers * n_experts]
  // (layer-major); empty for dense models.
  virtual std::span<const int64_t> expert_load() const { return {}; }
  // The final hidden states (after the last norm, before lm_head) of the last forward's
  // batch.hidden_rows, [hidden_rows.size(), d_model] in host memory: embeddings.
  virtual std::span<const float> hidden_states() const { return {}; }
  // Shows the following forward passes to `observer` (null: none), as forward_observer.h says.
  virtual void set_observer(ForwardObserver* observer) {}
};

// The forward pass of weights.config.architecture's family.
std::unique_ptr<Model> make_model(const ModelWeights& weights);

}  // namespace ember
