// Checkpoint -> ModelWeights: validates every tensor's presence and shape, keeps matrices
// zero-copy when their stored dtype is the compute dtype, converts / quantizes them otherwise,
// undoes GGUF's and llama2.c's interleaved Q/K row order, and builds --dummy models from a config.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
  // q8_0/q4_0 matrices are rewritten once into the Interleaved8 layout the decode kernels read
  // fastest (weight_layout.h); false keeps GGUF's own blocks as they are (zero-copy when the file
  // already holds the wanted dtype).
  bool interleave_quantized = true;
  // false (--no-mmap): matrices whose stored dtype is already the compute dtype are copied out of
  // the file into huge-page memory (huge_pages.h) instead of read in place: the load copies them
  // once and the process holds its own copy, and decode reads them faster (bf16 SmolLM2 tg128:
  // see README). Matrices that are converted or interleaved are copied either way.
  bool map_weights = true;
};

struct LoadedModel {
  Checkpoint checkpoint;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when not asked for
  DType matrix_dtype = DType::F32;       // dtype of the layer matrices after load
  double load_seconds = 0.0;
};

LoadedModel load_model(const LoadOptions& options);

// Builds weights from an opened checkpoint (real tensors, or random ones when it is ConfigOnly).
ModelWeights build_weights(const Checkpoint& checkpoint, std::optional<DType> dtype,
                           uint64_t dummy_seed, bool interleave_quantized,
                           DType* matrix_dtype_out = nullptr, bool map_weights = true);

// Loads the tokenizer a checkpoint names (GGUF-embedded, llama2.c tokenizer.bin). Throws
// ember::Error saying why when there is none ember can read.
std::unique_ptr<Tokenizer> load_checkpoint_tokenizer(const Checkpoint& checkpoint);

}  // namespace ember
