#include "ember/server/tokenize_api.h"

#include <set>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/core/json_depth.h"

namespace ember {
namespace {

using json = nlohmann::json;

json parse_object(std::string_view body, const std::set<std::string>& known) {
  check_json_depth(body, "", /*is_file=*/false);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error::invalid_request("", "the request body is not valid JSON");
  if (!j.is_object()) throw Error::invalid_request("", "the request body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (known.count(key) == 0) {
      throw Error::invalid_request(
          key, "unknown field '" + key + "' (this endpoint takes " + [&] {
            std::string names;
            for (const std::string& k : known) names.append(names.empty() ? "" : ", ").append(k);
            return names;
          }() + ")");
    }
  }
  return j;
}

bool get_bool(const json& j, const char* name, bool fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    throw Error::invalid_request(name, std::string("'") + name + "' must be a boolean");
  }
  return it->get<bool>();
}

}  // namespace

json handle_tokenize(const Tokenizer& tokenizer, std::string_view body) {
  const json j = parse_object(body, {"content", "add_special", "parse_special", "with_pieces"});
  auto content = j.find("content");
  if (content == j.end() || !content->is_string()) {
    throw Error::invalid_request("content", "'content' must be a string");
  }
  const bool add_special = get_bool(j, "add_special", false);
  const bool parse_special = get_bool(j, "parse_special", true);
  const bool with_pieces = get_bool(j, "with_pieces", false);
  const std::string text = content->get<std::string>();
  const std::vector<int32_t> ids = tokenizer.encode_with_special(text, add_special, parse_special);
  json tokens = json::array();
  for (const int32_t id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", tokenizer.token_bytes(id)}});
    } else {
      tokens.push_back(id);
    }
  }
  return json{{"tokens", std::move(tokens)}};
}

json handle_detokenize(const Tokenizer& tokenizer, std::string_view body) {
  const json j = parse_object(body, {"tokens"});
  auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) {
    throw Error::invalid_request("tokens", "'tokens' must be an array of token ids");
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= tokenizer.vocab_size()) {
      throw Error::invalid_request("tokens", "'tokens'[" + std::to_string(i) +
                                                 "] is not a token id of this model (0.." +
                                                 std::to_string(tokenizer.vocab_size() - 1) + ")");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return json{{"content", tokenizer.decode(ids)}};
}

}  // namespace ember
