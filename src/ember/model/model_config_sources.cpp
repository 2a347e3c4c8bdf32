// HF config.json / llama2.c header -> ModelConfig. Defaults follow transformers' LlamaConfig /
// Qwen2Config where a field may be absent; sizes that define the network have no sensible default
// and are required. The files themselves are parsed by formats/hf_config and formats/llama2c.
#include "ember/model/model_config_sources.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "ember/core/error.h"
#include "ember/formats/hf_config.h"

namespace ember {

namespace {

using Json = nlohmann::json;

// The architecture from architectures[0] / model_type; absent means llama.
std::string architecture_of(const HfConfigFields& f, const std::string& source) {
  std::string arch;
  if (const Json* a = f.get("architectures")) {
    if (!a->is_array()) f.wrong_type("architectures", *a, "an array");
    if (!a->empty()) {
      if (!(*a)[0].is_string()) f.wrong_type("architectures", (*a)[0], "an array of strings");
      arch = (*a)[0].get<std::string>();
    }
  }
  const std::string model_type = f.string_opt("model_type").value_or("");
  struct Known {
    const char* hf_class;
    const char* model_type;
    const char* architecture;
  };
  // SmolLM and TinyLlama declare themselves Llama.
  static const Known kKnown[] = {
      {"LlamaForCausalLM", "llama", "llama"},
      {"MistralForCausalLM", "mistral", "mistral"},
      {"Qwen2ForCausalLM", "qwen2", "qwen2"},
      {"Qwen3ForCausalLM", "qwen3", "qwen3"},
      {"Phi3ForCausalLM", "phi3", "phi3"},
      {"Gemma2ForCausalLM", "gemma2", "gemma2"},
      {"Gemma3ForCausalLM", "gemma3_text", "gemma3"},
      {"GPT2LMHeadModel", "gpt2", "gpt2"},
      {"MixtralForCausalLM", "mixtral", "mixtral"},
      {"Qwen2MoeForCausalLM", "qwen2_moe", "qwen2moe"},
      {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3moe"},
      {"OlmoeForCausalLM", "olmoe", "olmoe"},
  };
  for (const Known& k : kKnown) {
    if (arch == k.hf_class || (arch.empty() && model_type == k.model_type)) return k.architecture;
  }
  if (arch.empty() && model_type.empty()) return "llama";
  std::string hint;
  if (arch == "Gemma3ForConditionalGeneration") {
    hint = "; the multimodal Gemma 3 checkpoints are not supported yet (Gemma3ForCausalLM is)";
  }
  throw Error::in_file(ErrorKind::Unsupported, source,
                       "unsupported architecture '" + (arch.empty() ? model_type : arch) +
                           "' (ember runs " + supported_architectures() + ")" + hint);
}

std::vector<float> float_list(const HfConfigFields& s, const char* key) {
  const Json& j = s.require(key);
  if (!j.is_array()) s.wrong_type(key, j, "an array of numbers");
  std::vector<float> out;
  for (const Json& v : j) out.push_back(static_cast<float>(s.to_number(key, v)));
  return out;
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
  ModelConfig& c = config;
  if (*type == "default") return;
  c.rope_original_max_position =
      s.int_or("original_max_position_embeddings",
               f.int_or("original_max_position_embeddings", c.max_position_embeddings));
  if (*type == "linear") {
    c.rope_scaling = RopeScaling::Linear;
    c.rope_factor = static_cast<float>(s.required_number("factor"));
  } else if (*type == "llama3") {
    c.rope_scaling = RopeScaling::Llama3;
    c.rope_factor = static_cast<float>(s.required_number("factor"));
    c.rope_low_freq_factor = static_cast<float>(s.required_number("low_freq_factor"));
    c.rope_high_freq_factor = static_cast<float>(s.required_number("high_freq_factor"));
    c.rope_original_max_position = s.required_int("original_max_position_embeddings");
    if (!(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
      throw Error::in_file(ErrorKind::InvalidFile, source,
                           "invalid llama3 rope_scaling parameters");
    }
  } else if (*type == "yarn") {
    c.rope_scaling = RopeScaling::Yarn;
    c.rope_factor = static_cast<float>(s.required_number("factor"));
    c.rope_yarn_beta_fast = static_cast<float>(s.number_or("beta_fast", 32.0));
    c.rope_yarn_beta_slow = static_cast<float>(s.number_or("beta_slow", 1.0));
    c.rope_attention_factor = static_cast<float>(s.number_or("attention_factor", 0.0));
  } else if (*type == "longrope" || *type == "su") {
    c.rope_scaling = RopeScaling::LongRope;
    c.rope_long_factors = float_list(s, "long_factor");
    c.rope_short_factors = float_list(s, "short_factor");
    c.rope_attention_factor = static_cast<float>(s.number_or("attention_factor", 0.0));
    const auto half = static_cast<size_t>(c.rope_dim / 2);
    if (c.rope_long_factors.size() != half || c.rope_short_factors.size() != half) {
      throw Error::in_file(ErrorKind::InvalidFile, source,
                           "rope_scaling long_factor/short_factor must have rope_dim/2 = " +
                               std::to_string(half) + " values");
    }
  } else if (*type == "dynamic") {
    // The model then runs to original x factor positions, with the base for that length.
    c.rope_scaling = RopeScaling::Dynamic;
    c.rope_factor = static_cast<float>(s.required_number("factor"));
    c.rope_original_max_position = c.max_position_embeddings;
    c.max_position_embeddings = static_cast<int64_t>(
        static_cast<double>(c.max_position_embeddings) * std::max(1.0f, c.rope_factor));
  } else {
    throw Error::in_file(ErrorKind::Unsupported, source,
                         "unsupported rope_scaling type '" + *type +
                             "' (ember supports linear, llama3, yarn, longrope and dynamic)");
  }
  if (!(c.rope_factor > 0.0f) || c.rope_original_max_position <= 0) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "invalid rope_scaling parameters");
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

// GPT-2's config speaks its own names (n_embd, n_layer, ...).
ModelConfig gpt2_config(const HfConfigFields& f, const std::string& source) {
  ModelConfig c;
  c.architecture = "gpt2";
  c.d_model = f.required_int("n_embd");
  c.n_layers = f.required_int("n_layer");
  c.n_heads = f.required_int("n_head");
  c.n_kv_heads = c.n_heads;
  c.d_ffn = f.int_or("n_inner", 4 * c.d_model);
  c.vocab_size = f.required_int("vocab_size");
  c.max_position_embeddings = f.required_int("n_positions");
  c.head_dim = head_dim_of(f, c, source);
  c.rope_dim = c.head_dim;  // unused: learned positions
  c.rms_norm_eps = static_cast<float>(f.number_or("layer_norm_epsilon", 1e-5));
  const std::string act = f.string_opt("activation_function").value_or("gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast") {
    throw Error::in_file(
        ErrorKind::Unsupported, source,
        "unsupported activation_function '" + act + "' (ember runs GPT-2's tanh GELU: gelu_new)");
  }
  c.norm = NormKind::Layer;
  c.mlp = MlpKind::Gelu;
  c.learned_positions = c.attention_bias = c.linear_biases = c.fused_qkv = true;
  c.tie_word_embeddings = true;
  c.bos_token_id = c.eos_token_id = 50256;
  if (auto id = f.token_id("bos_token_id")) c.bos_token_id = *id;
  if (auto id = f.token_id("eos_token_id")) c.eos_token_id = *id;
  return c;
}

// Gemma 2 / 3: GeGLU, four norms, (1 + w) norms, sqrt(d) embeddings, query_pre_attn_scalar,
// soft-caps, interleaved sliding windows; Gemma 3 adds QK norms and a local RoPE base.
void gemma_features(const HfConfigFields& f, const std::string& source, ModelConfig& c) {
  const bool gemma3 = c.architecture == "gemma3";
  const std::string act = f.string_opt("hidden_activation")
                              .value_or(f.string_opt("hidden_act").value_or("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_new") {
    throw Error::in_file(ErrorKind::Unsupported, source,
                         "unsupported hidden_activation '" + act +
                             "' (ember runs Gemma's tanh GELU: gelu_pytorch_tanh)");
  }
  c.mlp = MlpKind::GeGlu;
  c.norm_weight_offset = c.sandwich_norms = true;
  c.qk_norm = gemma3;
  c.embed_scale = std::sqrt(static_cast<float>(c.d_model));
  c.query_scale = static_cast<float>(
      1.0 / std::sqrt(f.number_or("query_pre_attn_scalar", static_cast<double>(c.head_dim))));
  c.attn_softcap = static_cast<float>(f.number_or("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(f.number_or("final_logit_softcapping", 0.0));
  c.sliding_window = f.int_or("sliding_window", 0);
  c.sliding_window_pattern = gemma3 ? f.int_or("sliding_window_pattern", 6) : 2;
  if (const Json* types = f.get("layer_types")) {
    // Newer configs list each layer; ember needs them to follow (l + 1) % pattern.
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.n_layers) {
      f.wrong_type("layer_types", *types, "an array with one entry per layer");
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const bool sliding = (*types)[static_cast<size_t>(l)] == "sliding_attention";
      if (sliding != (c.layer_window(l) > 0)) {
        throw Error::in_file(ErrorKind::Unsupported, source,
                             "layer_types does not follow the sliding_window_pattern " +
                                 std::to_string(c.sliding_window_pattern) +
                                 " (other layer patterns are not supported)");
      }
    }
  }
  if (gemma3) c.rope_local_theta = static_cast<float>(f.number_or("rope_local_base_freq", 10000.0));
}

// The mixture-of-experts fields of Mixtral, Qwen2/Qwen3-MoE and OLMoE (each family's HF config
// class: its key names and defaults).
void moe_features(const HfConfigFields& f, const std::string& source, ModelConfig& c) {
  const std::string& a = c.architecture;
  if (a == "mixtral") {
    c.n_experts = f.required_int("num_local_experts");
    c.n_experts_used = f.int_or("num_experts_per_tok", 2);
    c.d_expert_ffn = c.d_ffn;
    c.expert_weights_normalized = true;  // Mixtral's router always renormalizes its top k
    c.sliding_window = f.int_or("sliding_window", 0);
    c.architecture = "llama";  // runs, and is written to GGUF, as llama with experts
    return;
  }
  c.n_experts = f.required_int("num_experts");
  c.n_experts_used = f.required_int("num_experts_per_tok");
  c.expert_weights_normalized = f.bool_or("norm_topk_prob", false);
  if (a == "olmoe") {
    c.d_expert_ffn = c.d_ffn;
    c.qk_norm_whole = true;
    if (f.get("clip_qkv") != nullptr) {
      throw Error::in_file(ErrorKind::Unsupported, source, "olmoe's clip_qkv is not supported");
    }
    return;
  }
  // qwen2moe / qwen3moe: the experts' own width, every layer sparse.
  c.d_expert_ffn = f.required_int("moe_intermediate_size");
  if (a == "qwen2moe") c.d_shared_expert_ffn = f.int_or("shared_expert_intermediate_size", 0);
  if (a == "qwen3moe") c.qk_norm = true;
  const nlohmann::json* dense = f.get("mlp_only_layers");
  if (f.int_or("decoder_sparse_step", 1) != 1 || (dense != nullptr && !dense->empty())) {
    throw Error::in_file(ErrorKind::Unsupported, source,
                         "dense layers among the expert layers (decoder_sparse_step != 1 or "
                         "mlp_only_layers) are not supported yet");
  }
}

// config.json's root object -> ModelConfig, checking fields in the order errors are reported.
ModelConfig config_from_hf_json(const Json& root, const std::string& source) {
  const HfConfigFields f(root, source);
  const std::string architecture = architecture_of(f, source);
  if (architecture == "gpt2") {
    ModelConfig c = gpt2_config(f, source);
    c.validate(source);
    return c;
  }

  ModelConfig c;
  c.architecture = architecture;
  const bool qwen = c.architecture == "qwen2" || c.architecture == "qwen3" ||
                    c.architecture == "qwen2moe" || c.architecture == "qwen3moe";
  const bool gemma = c.architecture == "gemma2" || c.architecture == "gemma3";

  c.d_model = f.required_int("hidden_size");
  c.d_ffn = f.required_int("intermediate_size");
  c.n_layers = f.required_int("num_hidden_layers");
  c.n_heads = f.required_int("num_attention_heads");
  c.n_kv_heads = f.int_or("num_key_value_heads", c.n_heads);
  c.vocab_size = f.required_int("vocab_size");
  c.head_dim = head_dim_of(f, c, source);
  c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) *
                                    f.number_or("partial_rotary_factor", 1.0));
  c.rms_norm_eps = static_cast<float>(f.number_or("rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(f.number_or("rope_theta", 10000.0));
  c.max_position_embeddings = f.int_or("max_position_embeddings", qwen ? 32768 : 2048);
  parse_rope_scaling(f, source, c);
  // Gemma ties its embeddings unless told otherwise.
  c.tie_word_embeddings = f.bool_or("tie_word_embeddings", gemma);
  // Qwen2 always has q/k/v biases (its config has no key for it); Llama has none by default.
  c.attention_bias =
      f.bool_or("attention_bias", c.architecture == "qwen2" || c.architecture == "qwen2moe");
  c.qk_norm = c.architecture == "qwen3";
  c.fused_qkv = c.fused_gate_up = c.architecture == "phi3";
  if (c.architecture == "mistral" || c.architecture == "phi3") {
    c.sliding_window = f.int_or("sliding_window", 0);
  }
  // Mistral is a Llama with (optionally) a sliding window: it runs, and is written to GGUF, as one.
  if (c.architecture == "mistral") c.architecture = "llama";
  if (qwen && f.bool_or("use_sliding_window", false)) {
    throw Error::in_file(ErrorKind::Unsupported, source,
                         "use_sliding_window with max_window_layers is not supported yet");
  }
  if (gemma) gemma_features(f, source, c);
  if (c.architecture == "mixtral" || c.architecture == "qwen2moe" || c.architecture == "qwen3moe" ||
      c.architecture == "olmoe") {
    moe_features(f, source, c);
  }
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
