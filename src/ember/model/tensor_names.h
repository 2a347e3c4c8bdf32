// ember names tensors as HF checkpoints do (model.layers.N.self_attn.q_proj.weight, ...).
// GGUF's llama.cpp names are mapped onto them at load; this file also says which component each
// tensor belongs to (for parameter counts) and which tensors a config implies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember/model/model_config.h"

namespace ember {

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"; nullopt for GGUF tensors
// ember does not use (e.g. rope_freqs.weight is handled separately).
std::optional<std::string> hf_name_from_gguf(const std::string& gguf_name);
// The inverse: "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"; nullopt for
// names with no GGUF counterpart here.
std::optional<std::string> gguf_name_from_hf(const std::string& hf_name);

enum class TensorComponent : uint8_t { Embedding, Attention, Mlp, Norm, LmHead, Other };
const char* component_name(TensorComponent component);
// Classifies an HF-style or GGUF-style tensor name.
TensorComponent classify_tensor(const std::string& name);

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  bool is_matrix = true;       // false for norms and biases (kept in f32)
};
// Every tensor a Llama-family model with `config` has, in load order (lm_head only when untied,
// q/k/v biases only with attention_bias).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Natural ("human") order: digit runs compare as numbers, so layers.2 < layers.10.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace ember
