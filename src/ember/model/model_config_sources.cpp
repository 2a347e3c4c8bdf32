// HF config.json / llama2.c header -> ModelConfig. Defaults follow transformers' LlamaConfig /
// Qwen2Config where a field may be absent; sizes that define the network have no sensible default
// and are required. The files themselves are parsed by formats/hf_config and formats/llama2c.
#include "ember/model/model_config_sources.h"

#include <optional>

#include "ember/core/error.h"
#include "ember/formats/hf_config.h"

namespace ember {

namespace {

using Json = nlohmann::json;

// "llama" or "qwen2" from architectures[0] / model_type; absent means llama.
std::string architecture_of(const HfConfigFields& f, const std::string& source) {
  std::string arch;
  if (const Json* a = f.get("architectures")) {
    if (!a->is_array()) f.wrong_type("architectures", *a, "an array");
    if (!a->empty()) {
      if (!(*a)[0].is_string()) f.wrong_type("architectures", (*a)[0], "an array of strings");
      arch = (*a)[0].get<std::string>();
    }
  }
  std::string model_type = f.string_opt("model_type").value_or("");
  // Mistral without a sliding window is a Llama; SmolLM and TinyLlama declare themselves Llama.
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || model_type == "llama" ||
      model_type == "mistral") {
    return "llama";
  }
  if (arch == "Qwen2ForCausalLM" || model_type == "qwen2") return "qwen2";
  if (arch.empty() && model_type.empty()) return "llama";
  throw Error::in_file(ErrorKind::Unsupported, source,
                       "unsupported architecture '" + (arch.empty() ? model_type : arch) +
                           "' (ember runs LlamaForCausalLM and Qwen2ForCausalLM)");
}

void parse_rope_scaling(const HfConfigFields& f, const std::string& source, ModelConfig& config) {
  const Json* rs = f.get("rope_scaling");
  if (rs == nullptr) return;
  if (!rs->is_object()) f.wrong_type("rope_scaling", *rs, "an object or null");
  HfConfigFields s(*rs, source, "rope_scaling.");
  // Newer configs say "rope_type", older ones "type".
  std::optional<std::string> type = s.string_opt("rope_type");
  if (!type) type = s.string_opt("type");
  if (!type) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "missing field 'rope_scaling.rope_type'");
  }
  if (*type == "default") return;
  if (*type != "llama3") {
    throw Error::in_file(
        ErrorKind::Unsupported, source,
        "unsupported rope_scaling type '" + *type + "' (ember supports llama3 rope scaling only)");
  }
  config.rope_scaling = RopeScaling::Llama3;
  config.rope_factor = static_cast<float>(s.required_number("factor"));
  config.rope_low_freq_factor = static_cast<float>(s.required_number("low_freq_factor"));
  config.rope_high_freq_factor = static_cast<float>(s.required_number("high_freq_factor"));
  config.rope_original_max_position = s.required_int("original_max_position_embeddings");
  if (!(config.rope_factor > 0.0f) ||
      !(config.rope_high_freq_factor > config.rope_low_freq_factor) ||
      config.rope_original_max_position <= 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "invalid llama3 rope_scaling parameters");
  }
}

// head_dim when given; otherwise hidden_size / num_attention_heads, which must divide evenly.
int64_t head_dim_of(const HfConfigFields& f, const ModelConfig& c, const std::string& source) {
  if (const Json* hd = f.get("head_dim")) return f.to_int("head_dim", *hd);
  if (c.n_heads <= 0 || c.d_model % c.n_heads != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source,
                         "hidden_size (" + std::to_string(c.d_model) +
                             ") is not a multiple of num_attention_heads (" +
                             std::to_string(c.n_heads) + ") and head_dim is not given");
  }
  return c.d_model / c.n_heads;
}

// config.json's root object -> ModelConfig, checking fields in the order errors are reported.
ModelConfig config_from_hf_json(const Json& root, const std::string& source) {
  const HfConfigFields f(root, source);

  ModelConfig c;
  c.architecture = architecture_of(f, source);
  const bool qwen2 = c.architecture == "qwen2";

  c.d_model = f.required_int("hidden_size");
  c.d_ffn = f.required_int("intermediate_size");
  c.n_layers = f.required_int("num_hidden_layers");
  c.n_heads = f.required_int("num_attention_heads");
  c.n_kv_heads = f.int_or("num_key_value_heads", c.n_heads);
  c.vocab_size = f.required_int("vocab_size");
  c.head_dim = head_dim_of(f, c, source);
  c.rope_dim = c.head_dim;
  c.rms_norm_eps = static_cast<float>(f.number_or("rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(f.number_or("rope_theta", 10000.0));
  c.max_position_embeddings = f.int_or("max_position_embeddings", qwen2 ? 32768 : 2048);
  parse_rope_scaling(f, source, c);
  c.tie_word_embeddings = f.bool_or("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases (its config has no key for it); Llama has none by default.
  c.attention_bias = f.bool_or("attention_bias", qwen2);
  if (auto id = f.token_id("bos_token_id")) c.bos_token_id = *id;
  if (auto id = f.token_id("eos_token_id")) c.eos_token_id = *id;

  c.validate(source);
  return c;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  return config_from_hf_json(parse_hf_config_json(json_text, source), source);
}

ModelConfig load_hf_config(const std::string& config_json_path) {
  return config_from_hf_json(read_hf_config_json(config_json_path), config_json_path);
}

ModelConfig config_from_llama2c(const Llama2cHeader& h, const std::string& source) {
  ModelConfig c;
  c.architecture = "llama";
  c.d_model = h.dim;
  c.d_ffn = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.head_size();
  c.rope_dim = c.head_dim;
  c.vocab_size = h.vocab_size;
  c.max_position_embeddings = h.seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.shared_classifier;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.validate(source);
  return c;
}

Llama2cCheckpoint load_llama2c_checkpoint(const std::string& path) {
  Llama2cFile file = open_llama2c_file(path);
  Llama2cCheckpoint ckpt;
  ckpt.config = config_from_llama2c(file.header, path);
  ckpt.tensors = llama2c_tensor_views(file);
  ckpt.mapping = std::move(file.mapping);
  return ckpt;
}

}  // namespace ember
