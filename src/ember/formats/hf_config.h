// ModelConfig from an HF config.json (LlamaForCausalLM, Qwen2ForCausalLM, ...).
#pragma once

#include <string>

#include "ember/model/model_config.h"

namespace ember {

// Reads hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (default: num_attention_heads), head_dim (default hidden/heads), vocab_size,
// rms_norm_eps, rope_theta (default 10000), rope_scaling (null or {"rope_type": "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}), tie_word_embeddings,
// attention_bias (Qwen2: true by default), max_position_embeddings, bos/eos_token_id (an array
// takes its first element). Throws ember::Error("<path>: missing field 'hidden_size'") etc.;
// a rope_scaling type other than llama3 is a clear error too.
ModelConfig load_hf_config(const std::string& config_json_path);
// Same, from JSON text (`source` names it in errors).
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);

}  // namespace ember
