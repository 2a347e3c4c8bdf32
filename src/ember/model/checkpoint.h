// Any checkpoint ember reads, opened to the point where its config and tensor directory are known
// but no weight has been touched: an HF directory (or a bare config.json with --dummy), a GGUF
// file, or a llama2.c .bin. `ember inspect` stops here; the loader goes on to build ModelWeights.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"
#include "ember/model/model_config.h"

namespace ember {

class GgufFile;

enum class CheckpointFormat : uint8_t { HfDirectory, Gguf, Llama2c, ConfigOnly };
const char* format_name(CheckpointFormat format);

struct StoredTensor {
  std::string stored_name;  // as in the file (GGUF name for GGUF)
  TensorView view;          // view.name is the canonical name ember uses (tensor_names.h)
  // The file stores the matrix transposed ([in, out], GPT-2's Conv1D); view.shape is the
  // transposed [out, in] the model reads, and the loader transposes the data.
  bool transposed = false;
};

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::HfDirectory;
  std::string path;           // what the user passed
  std::string config_source;  // file the config came from (for messages)
  ModelConfig config;
  // Tensors by canonical name. Empty for ConfigOnly.
  std::map<std::string, StoredTensor> tensors;
  // Every tensor in the file(s), including ones ember does not use, in file order.
  std::vector<StoredTensor> all_tensors;
  // GGUF (llama arch) and llama2.c store Q/K rows in the interleaved-pair RoPE layout; the loader
  // permutes them back to HF's half-rotation layout.
  bool qk_rows_interleaved = false;
  // Per-frequency divisors from GGUF's rope_freqs.weight (llama3 scaling baked by the converter).
  std::vector<float> rope_freq_factors;
  std::string torch_dtype;  // config.json's torch_dtype, if any
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  // Tensor bytes made in memory rather than mapped (a tensor-parallel rank's cut tensors).
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned_tensors;
  std::shared_ptr<const GgufFile> gguf;  // set for GGUF files (tokenizer, metadata)
  std::string tokenizer_path;            // llama2.c tokenizer.bin or HF tokenizer.json, if found
};

struct CheckpointOptions {
  bool dummy = false;          // config only; weights are generated later
  std::string tokenizer_path;  // --tokenizer override
};

// Opens `path` (directory, .json, .gguf or llama2.c .bin). Throws ember::Error naming the file.
Checkpoint open_checkpoint(const std::string& path, const CheckpointOptions& options);

// ModelConfig from GGUF metadata (general.architecture = llama | qwen2 | ...).
ModelConfig config_from_gguf(const GgufFile& gguf);
// Whether a GGUF mixture of `architecture` renormalizes its top-k expert weights when the file has
// no expert_weights_norm key (its family's published rule).
bool gguf_family_normalizes_experts(const std::string& architecture);

}  // namespace ember
