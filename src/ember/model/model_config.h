// One configuration struct for every Llama-family variant ember runs (Llama 1/2/3, SmolLM,
// TinyStories llama2.c models, Qwen2 with attention bias). Filled from config.json, GGUF
// metadata or a llama2.c header.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

enum class RopeScaling : uint8_t { None, Llama3 };

struct ModelConfig {
  std::string architecture = "llama";  // "llama" or "qwen2"
  int64_t d_model = 0;                 // hidden_size
  int64_t d_ffn = 0;                   // intermediate_size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // usually d_model / n_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;  // rotated dims per head; == head_dim for every model we load today

  RopeScaling rope_scaling = RopeScaling::None;
  // "llama3" rope scaling parameters (only meaningful when rope_scaling == Llama3).
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int64_t rope_original_max_position = 8192;

  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)

  int32_t bos_token_id = 1;
  int32_t eos_token_id = 2;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Throws ember::Error("<source>: ...") of kind InvalidFile, with `source` as its file, when a
  // number is missing or inconsistent (zero sizes, heads not dividing kv heads, ...).
  void validate(const std::string& source) const;
};

}  // namespace ember
