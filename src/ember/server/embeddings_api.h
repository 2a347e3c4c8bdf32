// POST /v1/embeddings: the model's final hidden states (after the last norm), pooled over the
// input's tokens — mean (default) or the last token — and L2-normalised, in OpenAI's response
// shape, as floats or base64 (little-endian float32). A causal LM's hidden states are not a
// retrieval model's embeddings: they serve clustering or similarity between texts the model
// reads alike, not search quality.
//   {"input": str | [str] | [int] | [[int]], "model", "encoding_format": "float" | "base64",
//    "dimensions" (must equal the model's width), "user", "pooling": "mean" | "last" (ember),
//    "normalize": bool = true (ember)}
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ember/core/error.h"

namespace ember {
class Tokenizer;
}

namespace ember::server {

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // token ids per input (BOS as the tokenizer adds it)
  bool base64 = false;
  bool mean = true;  // pooling: mean of every token, else the last token
  bool normalize = true;
};

// Parses and tokenizes a request; throws ember::Error (InvalidArgument, naming the field).
EmbeddingRequest parse_embedding_request(std::string_view body, const Tokenizer& tokenizer,
                                         int64_t d_model, int64_t max_tokens);

// hidden: [n_tokens, d_model] final hidden states of one input -> its pooled embedding.
std::vector<float> pool_embedding(const std::vector<float>& hidden, int64_t d_model, bool mean,
                                  bool normalize);

nlohmann::json embeddings_response(const std::vector<std::vector<float>>& embeddings, bool base64,
                                   const std::string& model, int64_t prompt_tokens);

}  // namespace ember::server
