#include "ember/model/model_config.h"

#include <cmath>

#include "ember/core/error.h"

namespace ember {

const char* supported_architectures() {
  return "llama, mistral, mixtral, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, phi3, gemma2, gemma3, "
         "gpt2";
}

float ModelConfig::rope_mscale() const {
  if (rope_attention_factor > 0.0f) return rope_attention_factor;
  if (rope_scaling == RopeScaling::Yarn && rope_factor > 1.0f) {
    return 0.1f * std::log(rope_factor) + 1.0f;
  }
  if (rope_scaling == RopeScaling::LongRope &&
      max_position_embeddings > rope_original_max_position) {
    const double s = static_cast<double>(max_position_embeddings) /
                     static_cast<double>(rope_original_max_position);
    return static_cast<float>(
        std::sqrt(1.0 + std::log(s) / std::log(static_cast<double>(rope_original_max_position))));
  }
  return 1.0f;
}

float ModelConfig::attention_scale() const {
  const double base = query_scale > 0.0f ? query_scale : 1.0 / std::sqrt(double(head_dim));
  const double m = rope_mscale();
  return static_cast<float>(base * m * m);
}

const char* ModelConfig::family() const {
  if (architecture == "gpt2") return "gpt2";
  if (architecture == "gemma2" || architecture == "gemma3") return "gemma";
  return "llama";
}

std::string ModelConfig::feature_summary() const {
  std::string f = norm == NormKind::Layer ? "layernorm" : "rmsnorm";
  if (norm_weight_offset) f += "(1+w)";
  f += mlp == MlpKind::SwiGlu ? ", swiglu" : mlp == MlpKind::GeGlu ? ", geglu" : ", gelu";
  if (learned_positions) {
    f += ", learned positions";
  } else {
    const char* kScaling[] = {"", " linear", " llama3", " yarn", " longrope", " dynamic-ntk"};
    f += std::string(", rope") + kScaling[static_cast<int>(rope_scaling)];
    if (rope_local_theta > 0.0f)
      f += " (local base " + std::to_string(int64_t(rope_local_theta)) + ")";
  }
  if (fused_qkv) f += ", fused qkv";
  if (fused_gate_up) f += ", fused gate/up";
  if (attention_bias) f += ", qkv bias";
  if (linear_biases) f += ", linear biases";
  if (qk_norm) f += ", qk-norm";
  if (sandwich_norms) f += ", post-norms";
  if (embed_scale != 1.0f) f += ", scaled embeddings";
  if (attn_softcap > 0.0f) f += ", attention soft-cap";
  if (final_softcap > 0.0f) f += ", logit soft-cap";
  if (sliding_window > 0) {
    f += ", sliding window " + std::to_string(sliding_window);
    if (sliding_window_pattern > 1) {
      f += " (layers with (l+1) % " + std::to_string(sliding_window_pattern) + " != 0)";
    }
  }
  if (n_experts > 0) {
    f += ", " + std::to_string(n_experts) + " experts (top-" + std::to_string(n_experts_used) +
         (expert_weights_normalized ? ", renormalized" : "") + ")";
    if (d_shared_expert_ffn > 0) f += " + shared expert";
  }
  if (qk_norm_whole) f += ", qk-norm over the projections";
  if (tie_word_embeddings) f += ", tied embeddings";
  return f;
}

void ModelConfig::validate(const std::string& source) const {
  auto require_positive = [&](int64_t v, const char* field) {
    if (v <= 0)
      throw Error::in_file(
          ErrorKind::InvalidFile, source,
          std::string(field) + " must be positive (got " + std::to_string(v) + ")");
  };
  require_positive(d_model, "hidden_size (d_model)");
  require_positive(d_ffn, "intermediate_size (d_ffn)");
  require_positive(n_layers, "num_hidden_layers");
  require_positive(n_heads, "num_attention_heads");
  require_positive(n_kv_heads, "num_key_value_heads");
  require_positive(head_dim, "head_dim");
  require_positive(vocab_size, "vocab_size");
  // Upper bounds far past any model (the largest have ~100k hidden, ~200 layers, ~256k vocab):
  // a crafted config must fail here, naming the field, not later in a giant allocation.
  auto require_at_most = [&](int64_t v, int64_t limit, const char* field) {
    if (v > limit)
      throw Error::in_file(ErrorKind::InvalidFile, source,
                           std::string(field) + " " + std::to_string(v) +
                               " is beyond any model ember can hold (at most " +
                               std::to_string(limit) + ")");
  };
  require_at_most(d_model, int64_t{1} << 20, "hidden_size (d_model)");
  require_at_most(d_ffn, int64_t{1} << 22, "intermediate_size (d_ffn)");
  require_at_most(n_layers, int64_t{1} << 14, "num_hidden_layers");
  require_at_most(n_heads, int64_t{1} << 14, "num_attention_heads");
  require_at_most(n_kv_heads, int64_t{1} << 14, "num_key_value_heads");
  require_at_most(head_dim, int64_t{1} << 14, "head_dim");
  require_at_most(vocab_size, int64_t{1} << 26, "vocab_size");
  if (n_experts < 0 || n_experts > 1024) {
    throw Error::in_file(
        ErrorKind::InvalidFile, source,
        "expert count " + std::to_string(n_experts) + " is out of range (0..1024)");
  }
  if (n_experts > 0) {
    if (n_experts_used < 1 || n_experts_used > n_experts) {
      throw Error::in_file(ErrorKind::InvalidFile, source,
                           "experts used per token (" + std::to_string(n_experts_used) +
                               ") must be between 1 and the expert count (" +
                               std::to_string(n_experts) + ")");
    }
    require_positive(d_expert_ffn, "expert feed-forward width");
    require_at_most(d_expert_ffn, int64_t{1} << 22, "expert feed-forward width");
    require_at_most(d_shared_expert_ffn, int64_t{1} << 22, "shared expert feed-forward width");
  }
  // The parameters those imply, in double (no int64 overflow): at most 10^13 (20 TB in bf16).
  const double d = static_cast<double>(d_model);
  const double ffn_width =
      n_experts > 0 ? static_cast<double>(n_experts) * static_cast<double>(d_expert_ffn) +
                          static_cast<double>(d_shared_expert_ffn)
                    : static_cast<double>(d_ffn);
  const double params =
      2.0 * static_cast<double>(vocab_size) * d +
      static_cast<double>(n_layers) *
          (d * static_cast<double>(head_dim) * static_cast<double>(2 * n_heads + 2 * n_kv_heads) +
           3.0 * d * ffn_width);
  if (params > 1e13) {
    throw Error::in_file(ErrorKind::InvalidFile, source,
                         "the config implies " +
                             std::to_string(static_cast<int64_t>(params / 1e9)) +
                             "B parameters, beyond any model ember can hold");
  }
  if (n_heads % n_kv_heads != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source,
                         "num_attention_heads (" + std::to_string(n_heads) +
                             ") is not a multiple of num_key_value_heads (" +
                             std::to_string(n_kv_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "head_dim must be even for RoPE");
  }
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source,
                         "rope dimension " + std::to_string(rope_dim) +
                             " is invalid for head_dim " + std::to_string(head_dim));
  }
  if (!(rms_norm_eps > 0.0f)) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "rms_norm_eps must be positive");
  }
  if (!(rope_theta > 0.0f)) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "rope_theta must be positive");
  }
}

}  // namespace ember
