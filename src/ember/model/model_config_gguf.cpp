// GGUF metadata -> ModelConfig, per architecture, with the keys and conventions llama.cpp's
// converter writes: <arch>.embedding_length etc.; Gemma's norms stored as (1 + w) already; RoPE
// scaling under <arch>.rope.scaling.*; Phi-3's LongRoPE factors as tensors (read by the
// checkpoint); llama.cpp's fixed choices where the file has no key (Gemma 2 slides on even layers,
// Gemma 3 on five of every six with a local RoPE base of 10000).
#include <cmath>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/model/checkpoint.h"

namespace ember {

namespace {

bool is_one_of(const std::string& a, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (a == n) return true;
  }
  return false;
}

// The features each architecture switches on (model_config.h).
void apply_family_features(ModelConfig& c) {
  const std::string& a = c.architecture;
  if (a == "qwen2" || a == "qwen2moe") c.attention_bias = true;
  if (a == "olmoe") c.qk_norm_whole = true;
  if (a == "qwen3" || a == "qwen3moe" || a == "gemma3") c.qk_norm = true;
  if (a == "phi3") c.fused_qkv = c.fused_gate_up = true;
  if (a == "gemma2" || a == "gemma3") {
    c.mlp = MlpKind::GeGlu;
    c.sandwich_norms = true;
    c.embed_scale = std::sqrt(static_cast<float>(c.d_model));
    c.tie_word_embeddings = true;
    // The 27B shapes scale queries by d_model / n_heads instead of head_dim.
    const bool big = (a == "gemma2" && c.n_layers == 46) || (a == "gemma3" && c.n_layers == 62);
    c.query_scale = 1.0f / std::sqrt(static_cast<float>(big ? c.d_model / c.n_heads : c.head_dim));
  }
  if (a == "gpt2") {
    c.norm = NormKind::Layer;
    c.mlp = MlpKind::Gelu;
    c.learned_positions = true;
    c.attention_bias = c.linear_biases = c.fused_qkv = true;
  }
}

}  // namespace

bool gguf_family_normalizes_experts(const std::string& architecture) {
  // Mixtral always renormalizes; Qwen3-MoE's released configs set norm_topk_prob (as llama.cpp
  // reads qwen3moe); Qwen2-MoE's and OLMoE's do not.
  return architecture == "llama" || architecture == "qwen3moe";
}

ModelConfig config_from_gguf(const GgufFile& gguf) {
  ModelConfig c;
  c.architecture = gguf.get_string("general.architecture");
  if (!is_one_of(c.architecture, {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "gpt2",
                                  "qwen2moe", "qwen3moe", "olmoe"})) {
    throw Error::in_file(ErrorKind::Unsupported, gguf.path(),
                         "unsupported architecture '" + c.architecture + "' (ember runs " +
                             supported_architectures() + ")");
  }
  const std::string a = c.architecture + ".";
  auto int_or = [&](const std::string& key, int64_t fallback) {
    return gguf.find(key) ? gguf.get_int(key) : fallback;
  };
  auto float_or = [&](const std::string& key, double fallback) {
    return gguf.find(key) ? gguf.get_float(key) : fallback;
  };
  c.d_model = gguf.get_int(a + "embedding_length");
  c.d_ffn = gguf.get_int(a + "feed_forward_length");
  c.n_layers = gguf.get_int(a + "block_count");
  c.n_heads = gguf.get_int(a + "attention.head_count");
  c.n_kv_heads = int_or(a + "attention.head_count_kv", c.n_heads);
  c.head_dim = c.n_heads > 0 ? int_or(a + "attention.key_length", c.d_model / c.n_heads) : 0;
  c.rope_dim = int_or(a + "rope.dimension_count", c.head_dim);
  c.rms_norm_eps = static_cast<float>(gguf.find(a + "attention.layer_norm_epsilon")
                                          ? gguf.get_float(a + "attention.layer_norm_epsilon")
                                          : float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(float_or(a + "rope.freq_base", 10000.0));
  c.max_position_embeddings = int_or(a + "context_length", 2048);
  if (const GgufValue* v = gguf.find(a + "vocab_size")) {
    c.vocab_size = v->as_int().value_or(0);
  } else if (const auto* tok = gguf.find_tensor("token_embd.weight")) {
    c.vocab_size = tok->shape.empty() ? 0 : tok->shape[0];
  }
  // Mixtures: the per-expert width is feed_forward_length (llama, olmoe) or its own key (qwen2moe,
  // whose shared expert has one too). Whether the top-k weights are renormalized is not in the
  // file: Mixtral's definition always does, Qwen2-MoE's and OLMoE's published configs do not.
  c.n_experts = int_or(a + "expert_count", 0);
  c.n_experts_used = int_or(a + "expert_used_count", 0);
  if (c.n_experts > 0) {
    c.d_expert_ffn = int_or(a + "expert_feed_forward_length", c.d_ffn);
    c.d_shared_expert_ffn = int_or(a + "expert_shared_feed_forward_length", 0);
    c.expert_weights_normalized = gguf_family_normalizes_experts(c.architecture);
    if (const GgufValue* v = gguf.find(a + "expert_weights_norm")) {
      c.expert_weights_normalized = v->as_int().value_or(0) != 0;
    }
  } else if (c.architecture == "qwen2moe" || c.architecture == "qwen3moe" ||
             c.architecture == "olmoe") {
    throw Error::in_file(ErrorKind::InvalidFile, gguf.path(),
                         c.architecture + " without " + a + "expert_count");
  }
  c.bos_token_id = static_cast<int32_t>(int_or("tokenizer.ggml.bos_token_id", 1));
  c.eos_token_id = static_cast<int32_t>(int_or("tokenizer.ggml.eos_token_id", 2));
  apply_family_features(c);

  // RoPE scaling: linear and YaRN by key; llama3 comes as the rope_freqs tensor and LongRoPE as
  // rope_factors_{long,short} (both read by the checkpoint).
  if (gguf.find(a + "rope.scaling.type")) {
    const std::string type = gguf.get_string(a + "rope.scaling.type");
    if (type == "linear") {
      c.rope_scaling = RopeScaling::Linear;
    } else if (type == "yarn") {
      c.rope_scaling = RopeScaling::Yarn;
    } else if (type != "none") {
      throw Error::in_file(ErrorKind::Unsupported, gguf.path(),
                           "unsupported rope scaling type '" + type +
                               "' (ember reads none, linear and yarn from GGUF)");
    }
    c.rope_factor = static_cast<float>(float_or(a + "rope.scaling.factor", 1.0));
  }
  c.rope_original_max_position =
      int_or(a + "rope.scaling.original_context_length", c.max_position_embeddings);
  c.rope_attention_factor = static_cast<float>(float_or(a + "rope.scaling.attn_factor", 0.0));

  c.sliding_window = int_or(a + "attention.sliding_window", 0);
  if (c.architecture == "gemma2") c.sliding_window_pattern = 2;
  if (c.architecture == "gemma3") {
    c.sliding_window_pattern = int_or(a + "attention.sliding_window_pattern", 6);
    c.rope_local_theta = static_cast<float>(float_or(a + "rope.freq_base_swa", 10000.0));
  }
  // Written by ember when a checkpoint's query scale is not llama.cpp's default for the family.
  c.query_scale = static_cast<float>(float_or(a + "attention.scale", c.query_scale));
  c.attn_softcap = static_cast<float>(float_or(a + "attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(float_or(a + "final_logit_softcapping", 0.0));
  if (c.architecture == "gpt2") c.rope_dim = c.head_dim;  // unused: learned positions
  c.validate(gguf.path());
  return c;
}

}  // namespace ember
