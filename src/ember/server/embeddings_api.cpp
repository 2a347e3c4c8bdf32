#include "ember/server/embeddings_api.h"

#include <cmath>
#include <cstring>

#include "ember/core/json_depth.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember::server {

namespace {

using nlohmann::json;

std::string base64_encode(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian float32, as OpenAI sends
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint32_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= bytes[i + 2];
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::vector<int32_t> token_ids(const json& arr, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const json& t : arr) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= tokenizer.vocab_size()) {
      throw Error::invalid_request("input", "token ids must be integers in [0, " +
                                                std::to_string(tokenizer.vocab_size()) + ")");
    }
    ids.push_back(t.get<int32_t>());
  }
  return ids;
}

}  // namespace

EmbeddingRequest parse_embedding_request(std::string_view body, const Tokenizer& tokenizer,
                                         int64_t d_model, int64_t max_tokens) {
  check_json_depth(body, "", /*is_file=*/false);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error::invalid_request("", "the request body must be a JSON object");
  }
  static const char* const known[] = {"input", "model",   "encoding_format", "dimensions",
                                      "user",  "pooling", "normalize"};
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    if (std::find(std::begin(known), std::end(known), key) == std::end(known)) {
      throw Error::invalid_request(key, "unknown field '" + key + "' for /v1/embeddings");
    }
  }
  EmbeddingRequest r;
  const json& input = j.value("input", json());
  auto encode = [&](const std::string& text) {
    if (text.empty()) throw Error::invalid_request("input", "an input string is empty");
    return tokenizer.encode_with_special(text, tokenizer.add_bos_default(), false);
  };
  if (input.is_string()) {
    r.inputs.push_back(encode(input.get<std::string>()));
  } else if (input.is_array() && !input.empty() && input[0].is_number()) {
    r.inputs.push_back(token_ids(input, tokenizer));
  } else if (input.is_array() && !input.empty()) {
    if (input.size() > 256) throw Error::invalid_request("input", "at most 256 inputs per request");
    for (const json& item : input) {
      if (item.is_string()) {
        r.inputs.push_back(encode(item.get<std::string>()));
      } else if (item.is_array()) {
        r.inputs.push_back(token_ids(item, tokenizer));
      } else {
        throw Error::invalid_request("input", "'input' items must be strings or token-id arrays");
      }
    }
  } else {
    throw Error::invalid_request(
        "input", "'input' must be a string, a token-id array or a non-empty array of them");
  }
  for (const auto& ids : r.inputs) {
    if (ids.empty()) throw Error::invalid_request("input", "an input is empty");
    if (static_cast<int64_t>(ids.size()) > max_tokens) {
      throw Error::invalid_request("input", "an input of " + std::to_string(ids.size()) +
                                                " tokens exceeds the context of " +
                                                std::to_string(max_tokens))
          .with_reason("context_length_exceeded");
    }
  }
  if (j.contains("encoding_format") && !j["encoding_format"].is_null()) {
    const json& f = j["encoding_format"];
    if (f != "float" && f != "base64") {
      throw Error::invalid_request("encoding_format", "'encoding_format' must be float or base64");
    }
    r.base64 = f == "base64";
  }
  if (j.contains("dimensions") && !j["dimensions"].is_null() && j["dimensions"] != d_model) {
    throw Error::invalid_request("dimensions", "this model's embeddings have " +
                                                   std::to_string(d_model) +
                                                   " dimensions; it cannot shorten them");
  }
  if (j.contains("pooling") && !j["pooling"].is_null()) {
    if (j["pooling"] != "mean" && j["pooling"] != "last") {
      throw Error::invalid_request("pooling", "'pooling' must be mean or last");
    }
    r.mean = j["pooling"] == "mean";
  }
  if (j.contains("normalize") && !j["normalize"].is_null()) {
    if (!j["normalize"].is_boolean())
      throw Error::invalid_request("normalize", "'normalize' must be a boolean");
    r.normalize = j["normalize"];
  }
  return r;
}

std::vector<float> pool_embedding(const std::vector<float>& hidden, int64_t d_model, bool mean,
                                  bool normalize) {
  const auto D = static_cast<size_t>(d_model);
  const size_t n = hidden.size() / D;
  std::vector<double> acc(D, 0.0);
  if (mean) {
    for (size_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < D; ++i) acc[i] += hidden[t * D + i];
    }
    for (double& a : acc) a /= static_cast<double>(n);
  } else {
    for (size_t i = 0; i < D; ++i) acc[i] = hidden[(n - 1) * D + i];
  }
  double norm = 0.0;
  for (double a : acc) norm += a * a;
  norm = std::sqrt(norm);
  std::vector<float> out(D);
  for (size_t i = 0; i < D; ++i) {
    out[i] = static_cast<float>(normalize && norm > 0 ? acc[i] / norm : acc[i]);
  }
  return out;
}

nlohmann::json embeddings_response(const std::vector<std::vector<float>>& embeddings, bool base64,
                                   const std::string& model, int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    data.push_back(
        {{"object", "embedding"},
         {"index", i},
         {"embedding", base64 ? json(base64_encode(embeddings[i])) : json(embeddings[i])}});
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace ember::server
