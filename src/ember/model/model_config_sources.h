// ModelConfig from the checkpoint formats that describe a model outside GGUF metadata: an HF
// config.json (read through formats/hf_config.h) and a llama2.c header (formats/llama2c.h). The
// formats only parse files; what their fields mean for ember's model lives here.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"
#include "ember/formats/llama2c.h"
#include "ember/model/model_config.h"

namespace ember {

// Reads the Llama-style fields (hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, vocab_size, rms_norm_eps, rope_theta,
// rope_scaling {linear, llama3, yarn, longrope}, tie_word_embeddings, attention_bias,
// max_position_embeddings, bos/eos_token_id) and each family's own (GPT-2's n_embd...; Mistral's
// and Phi-3's sliding_window; Gemma's query_pre_attn_scalar, soft-caps, sliding window pattern or
// layer_types, rope_local_base_freq). Throws ember::Error("<path>: missing field 'hidden_size'")
// etc.; an architecture or rope_scaling type ember does not run is a clear error naming the
// supported ones.
ModelConfig load_hf_config(const std::string& config_json_path);
// Same, from JSON text (`source` names it in errors).
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);

// A llama2.c model: always Llama, rope_theta 10000, eps 1e-5, head_dim = dim / n_heads, BOS 1,
// EOS 2. Throws ember::Error naming `source` when the sizes are inconsistent
// (ModelConfig::validate).
ModelConfig config_from_llama2c(const Llama2cHeader& header, const std::string& source);

struct Llama2cCheckpoint {
  ModelConfig config;
  std::shared_ptr<const MappedFile> mapping;
  std::map<std::string, TensorView> tensors;  // as llama2c_tensor_views
};

// Header, then config (validated), then tensors, so a header whose sizes make no model is
// reported as such rather than as a file too short for the tensors it implies.
Llama2cCheckpoint load_llama2c_checkpoint(const std::string& path);

}  // namespace ember
