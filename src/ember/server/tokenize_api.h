// POST /tokenize and /detokenize, as llama.cpp's server offers them: text to token ids (optionally
// with each id's piece) and ids back to text, with the model's own tokenizer. Every field is
// checked; an unknown one is refused by name (400), never ignored.
//   /tokenize   {"content": str, "add_special": bool = false, "parse_special": bool = true,
//                "with_pieces": bool = false}
//            -> {"tokens": [id, ...]}  or, with_pieces, {"tokens": [{"id": id, "piece": str}, ...]}
//   /detokenize {"tokens": [id, ...]} -> {"content": str}
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "ember/tokenizer/tokenizer.h"

namespace ember {

// The response body for a /tokenize request body; throws ember::Error (invalid_request, naming
// the field) for a malformed one.
nlohmann::json handle_tokenize(const Tokenizer& tokenizer, std::string_view body);
// The same for /detokenize; ids outside the vocabulary are refused by index.
nlohmann::json handle_detokenize(const Tokenizer& tokenizer, std::string_view body);

}  // namespace ember
