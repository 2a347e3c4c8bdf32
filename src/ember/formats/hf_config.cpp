// HF config.json file reading and typed field access. Field semantics (LlamaConfig / Qwen2Config
// defaults, which sizes are required) live in model/model_config_sources.cpp.
#include "ember/formats/hf_config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "ember/core/error.h"
#include "ember/core/json_depth.h"

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

}  // namespace

const Json* HfConfigFields::get(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& HfConfigFields::require(const char* key) const {
  const Json* j = get(key);
  if (j == nullptr) {
    throw Error::in_file(ErrorKind::InvalidFile, source_, "missing field '" + name(key) + "'");
  }
  return *j;
}

void HfConfigFields::wrong_type(const char* key, const Json& j, const char* expected) const {
  throw Error::in_file(
      ErrorKind::InvalidFile, source_,
      "field '" + name(key) + "' must be " + expected + " (got " + json_kind(j) + ")");
}

int64_t HfConfigFields::to_int(const char* key, const Json& j) const {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) wrong_type(key, j, "an int64");
    return static_cast<int64_t>(j.get<uint64_t>());
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  wrong_type(key, j, "an integer");
}

double HfConfigFields::to_number(const char* key, const Json& j) const {
  if (!j.is_number()) wrong_type(key, j, "a number");
  return j.get<double>();
}

int64_t HfConfigFields::int_or(const char* key, int64_t fallback) const {
  const Json* j = get(key);
  return j ? to_int(key, *j) : fallback;
}

double HfConfigFields::number_or(const char* key, double fallback) const {
  const Json* j = get(key);
  return j ? to_number(key, *j) : fallback;
}

bool HfConfigFields::bool_or(const char* key, bool fallback) const {
  const Json* j = get(key);
  if (j == nullptr) return fallback;
  if (!j->is_boolean()) wrong_type(key, *j, "a boolean");
  return j->get<bool>();
}

std::optional<std::string> HfConfigFields::string_opt(const char* key) const {
  const Json* j = get(key);
  if (j == nullptr) return std::nullopt;
  if (!j->is_string()) wrong_type(key, *j, "a string");
  return j->get<std::string>();
}

std::optional<int32_t> HfConfigFields::token_id(const char* key) const {
  const Json* j = get(key);
  if (j == nullptr) return std::nullopt;
  const Json* v = j;
  if (j->is_array()) {
    if (j->empty()) return std::nullopt;
    v = &(*j)[0];
  }
  int64_t id = to_int(key, *v);
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    throw Error::in_file(ErrorKind::InvalidFile, source_,
                         "field '" + name(key) + "' is out of range (" + std::to_string(id) + ")");
  }
  return static_cast<int32_t>(id);
}

Json parse_hf_config_json(const std::string& json_text, const std::string& source) {
  Json root;
  check_json_depth(json_text, source, /*is_file=*/true);
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    throw Error::in_file(ErrorKind::InvalidFile, source, std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) {
    throw Error::in_file(ErrorKind::InvalidFile, source, "config is not a JSON object");
  }
  return root;
}

Json read_hf_config_json(const std::string& config_json_path) {
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
  return parse_hf_config_json(ss.str(), config_json_path);
}

}  // namespace ember
