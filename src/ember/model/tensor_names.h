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

// ember's canonical tensor names are HF Llama's (model.layers.N.self_attn.q_proj.weight, ...),
// extended for what other families add: self_attn.qkv_proj / mlp.gate_up_proj (fused, split at
// load), *.bias, self_attn.q_norm / k_norm, self_attn.output_norm and mlp.output_norm (Gemma's
// norms of the attention and MLP outputs), model.embed_positions (GPT-2's wpe). Llama's meaning of
// post_attention_layernorm (the norm before the MLP) is kept for every family.

// GGUF -> canonical: "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight" (`arch`:
// general.architecture; Phi-3's ffn_up is the fused gate/up). nullopt for GGUF tensors ember does
// not use (rope_freqs and rope_factors_* are read separately).
std::optional<std::string> hf_name_from_gguf(const std::string& gguf_name, const std::string& arch);
// The inverse; nullopt for names with no GGUF counterpart.
std::optional<std::string> gguf_name_from_hf(const std::string& hf_name,
                                             const std::string& arch = "llama");
// An HF checkpoint's name -> canonical (GPT-2: "h.0.attn.c_attn.weight" or
// "transformer.h.0.attn.c_attn.weight" -> "model.layers.0.self_attn.qkv_proj.weight"; Gemma's
// norms); names that need no change come back as they are.
std::string canonical_from_hf(const std::string& hf_name, const std::string& arch);
// The HF name a canonical tensor has in `arch`'s checkpoints (for messages).
std::string hf_from_canonical(const std::string& canonical, const std::string& arch);
// Whether an HF tensor is stored [in, out] (GPT-2's Conv1D) and must be transposed at load.
bool hf_weight_is_transposed(const std::string& hf_name, const std::string& arch);

enum class TensorComponent : uint8_t { Embedding, Attention, Mlp, Norm, LmHead, Other };
const char* component_name(TensorComponent component);
// Classifies an HF-style or GGUF-style tensor name.
TensorComponent classify_tensor(const std::string& name);

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  bool is_matrix = true;       // false for norms and biases (kept in f32)
};
// Every tensor a model with `config` has, canonical names, in load order (lm_head only when
// untied, biases, QK norms, post-norms, positions only where the config has them; fused Q/K/V and
// gate/up as one tensor each where the config says so).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Natural ("human") order: digit runs compare as numbers, so layers.2 < layers.10.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace ember
