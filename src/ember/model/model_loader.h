// Checkpoint -> ModelWeights: validates every tensor's presence and shape, converts / quantizes
// matrices to the asked dtype on the host (none when the stored dtype is the compute dtype), undoes
// GGUF's and llama2.c's interleaved Q/K row order, builds --dummy models from a config, and hands
// every host view to the backend (which keeps it in place, copies or re-lays it out).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ember/backend/backend.h"
#include "ember/core/dtype.h"
#include "ember/model/checkpoint.h"
#include "ember/model/weights.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

struct LoadOptions {
  std::string path;
  std::string tokenizer_path;  // overrides the one found beside the model
  std::optional<DType> dtype;  // matrices converted to this; default: as stored (dummy: bf16)
  bool dummy = false;          // seeded random weights from the config alone
  uint64_t dummy_seed = 1234;
  bool load_tokenizer = true;
  // --check-weights: scan every value of every tensor for NaN / Inf (default: norms and biases in
  // full, matrices on a sample of rows).
  bool check_weights = false;
  // Which backend runs the model, its threads, and how it keeps the weights (--backend, -t,
  // --no-interleave, --no-mmap).
  BackendOptions backend;
  // Builds the weights into this backend instead of making one from `backend` (a draft model
  // shares the target's backend: one thread pool, one device).
  std::shared_ptr<Backend> shared_backend;
  // Applied to the opened checkpoint before any weight is read (a tensor-parallel rank cuts it to
  // its shard, parallel/tensor_shard.h); the fingerprint is the whole checkpoint's.
  std::function<void(Checkpoint&)> adapt_checkpoint;
};

struct LoadedModel {
  Checkpoint checkpoint;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when not asked for
  double load_seconds = 0.0;
};

LoadedModel load_model(const LoadOptions& options);

// Builds weights from an opened checkpoint (real tensors, or random ones when it is ConfigOnly)
// into `backend`.
ModelWeights build_weights(const Checkpoint& checkpoint, std::optional<DType> dtype,
                           uint64_t dummy_seed, std::shared_ptr<Backend> backend,
                           bool check_all_weights = false);

// Loads the tokenizer a checkpoint names (GGUF-embedded, llama2.c tokenizer.bin). Throws
// ember::Error saying why when there is none ember can read.
std::unique_ptr<Tokenizer> load_checkpoint_tokenizer(const Checkpoint& checkpoint);

}  // namespace ember
