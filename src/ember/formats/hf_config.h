// HF config.json at the file level: reading and parsing it into its root JSON object, and typed
// access to its fields whose errors name the file and the (dotted) field. What the fields mean for
// a model (defaults, supported architectures) is decided in model/model_config_sources.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ember {

// Parses `json_text`; throws ember::Error("<source>: invalid JSON: ...") or "<source>: config is
// not a JSON object".
nlohmann::json parse_hf_config_json(const std::string& json_text, const std::string& source);
// Reads and parses the file; throws ember::Error naming it when it is missing, not a regular
// file, or unreadable (and as parse_hf_config_json).
nlohmann::json read_hf_config_json(const std::string& config_json_path);

// Typed access to one JSON object of a config. Absent and null fields read the same ("use the
// default" in HF configs). Errors: "<source>: missing field '<prefix><key>'" and
// "<source>: field '<prefix><key>' must be <kind> (got <kind>)".
// `obj` must outlive this reader.
class HfConfigFields {
 public:
  HfConfigFields(const nlohmann::json& obj, const std::string& source,
                 const std::string& prefix = "")
      : obj_(obj), source_(source), prefix_(prefix) {}

  // The field, or nullptr when absent or null.
  const nlohmann::json* get(const char* key) const;
  const nlohmann::json& require(const char* key) const;
  [[noreturn]] void wrong_type(const char* key, const nlohmann::json& j,
                               const char* expected) const;

  int64_t to_int(const char* key, const nlohmann::json& j) const;
  double to_number(const char* key, const nlohmann::json& j) const;
  int64_t required_int(const char* key) const { return to_int(key, require(key)); }
  int64_t int_or(const char* key, int64_t fallback) const;
  double number_or(const char* key, double fallback) const;
  double required_number(const char* key) const { return to_number(key, require(key)); }
  bool bool_or(const char* key, bool fallback) const;
  std::optional<std::string> string_opt(const char* key) const;
  // bos/eos ids: an integer, or an array whose first element is used (Llama 3 lists several
  // eos); out of int32 range is an error.
  std::optional<int32_t> token_id(const char* key) const;

  std::string name(const char* key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
};

}  // namespace ember
