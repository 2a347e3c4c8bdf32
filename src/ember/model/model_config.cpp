#include "ember/model/model_config.h"

#include "ember/core/error.h"

namespace ember {

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
