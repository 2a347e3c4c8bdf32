// HF config.json -> ModelConfig. Defaults follow transformers' LlamaConfig / Qwen2Config where a
// field may be absent; sizes that define the network have no sensible default and are required.
#include "ember/formats/hf_config.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ember/core/error.h"

namespace ember {

namespace {

using Json = nlohmann::json;

const char* json_kind(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    default:
      return "value";
  }
}

// Typed access to one JSON object; every error names the source and the (dotted) field.
class Fields {
 public:
  Fields(const Json& obj, const std::string& source, const std::string& prefix = "")
      : obj_(obj), source_(source), prefix_(prefix) {}

  // The field, or nullptr when absent or null (null means "use the default" in HF configs).
  const Json* get(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const Json& require(const char* key) const {
    const Json* j = get(key);
    if (j == nullptr) {
      throw Error::in_file(ErrorKind::InvalidFile, source_, "missing field '" + name(key) + "'");
    }
    return *j;
  }

  [[noreturn]] void wrong_type(const char* key, const Json& j, const char* expected) const {
    throw Error::in_file(
        ErrorKind::InvalidFile, source_,
        "field '" + name(key) + "' must be " + expected + " (got " + json_kind(j) + ")");
  }

  int64_t to_int(const char* key, const Json& j) const {
    if (j.is_number_unsigned()) {
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) wrong_type(key, j, "an int64");
      return static_cast<int64_t>(j.get<uint64_t>());
    }
    if (j.is_number_integer()) return j.get<int64_t>();
    wrong_type(key, j, "an integer");
  }

  double to_number(const char* key, const Json& j) const {
    if (!j.is_number()) wrong_type(key, j, "a number");
    return j.get<double>();
  }

  int64_t required_int(const char* key) const { return to_int(key, require(key)); }
  int64_t int_or(const char* key, int64_t fallback) const {
    const Json* j = get(key);
    return j ? to_int(key, *j) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    const Json* j = get(key);
    return j ? to_number(key, *j) : fallback;
  }
  double required_number(const char* key) const { return to_number(key, require(key)); }
  bool bool_or(const char* key, bool fallback) const {
    const Json* j = get(key);
    if (j == nullptr) return fallback;
    if (!j->is_boolean()) wrong_type(key, *j, "a boolean");
    return j->get<bool>();
  }
  std::optional<std::string> string_opt(const char* key) const {
    const Json* j = get(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_string()) wrong_type(key, *j, "a string");
    return j->get<std::string>();
  }

  // bos/eos ids: an integer, or an array whose first element is used (Llama 3 lists several eos).
  std::optional<int32_t> token_id(const char* key) const {
    const Json* j = get(key);
    if (j == nullptr) return std::nullopt;
    const Json* v = j;
    if (j->is_array()) {
      if (j->empty()) return std::nullopt;
      v = &(*j)[0];
    }
    int64_t id = to_int(key, *v);
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      throw Error::in_file(
          ErrorKind::InvalidFile, source_,
          "field '" + name(key) + "' is out of range (" + std::to_string(id) + ")");
    }
    return static_cast<int32_t>(id);
  }

  std::string name(const char* key) const { return prefix_ + key; }

 private:
  const Json& obj_;
  const std::string& source_;
  std::string prefix_;
};

// "llama" or "qwen2" from architectures[0] / model_type; absent means llama.
std::string architecture_of(const Fields& f, const std::string& source) {
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

void parse_rope_scaling(const Fields& f, const std::string& source, ModelConfig& config) {
  const Json* rs = f.get("rope_scaling");
  if (rs == nullptr) return;
  if (!rs->is_object()) f.wrong_type("rope_scaling", *rs, "an object or null");
  Fields s(*rs, source, "rope_scaling.");
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

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    throw Error::in_file(ErrorKind::InvalidFile, source, std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "config is not a JSON object");
  }
  Fields f(root, source);

  ModelConfig c;
  c.architecture = architecture_of(f, source);
  const bool qwen2 = c.architecture == "qwen2";

  c.d_model = f.required_int("hidden_size");
  c.d_ffn = f.required_int("intermediate_size");
  c.n_layers = f.required_int("num_hidden_layers");
  c.n_heads = f.required_int("num_attention_heads");
  c.n_kv_heads = f.int_or("num_key_value_heads", c.n_heads);
  c.vocab_size = f.required_int("vocab_size");
  if (const Json* hd = f.get("head_dim")) {
    c.head_dim = f.to_int("head_dim", *hd);
  } else {
    if (c.n_heads <= 0 || c.d_model % c.n_heads != 0) {
      throw Error::in_file(ErrorKind::InvalidFile, source,
                           "hidden_size (" + std::to_string(c.d_model) +
                               ") is not a multiple of num_attention_heads (" +
                               std::to_string(c.n_heads) + ") and head_dim is not given");
    }
    c.head_dim = c.d_model / c.n_heads;
  }
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

ModelConfig load_hf_config(const std::string& config_json_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_json_path, ec)) {
    throw Error::in_file(ErrorKind::NotFound, config_json_path,
                         "config file not found (or not a regular file)");
  }
  std::ifstream in(config_json_path, std::ios::binary);
  if (!in) {
    throw Error::in_file(ErrorKind::NotFound, config_json_path, "cannot open config file");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    throw Error::in_file(ErrorKind::InvalidFile, config_json_path, "cannot read config file");
  }
  return parse_hf_config(ss.str(), config_json_path);
}

}  // namespace ember
