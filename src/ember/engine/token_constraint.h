// A per-request restriction on which tokens may come next (grammar-constrained decoding: JSON
// schemas, GBNF grammars, forced tool calls). The engine asks it before each sampled token of a
// sequence and tells it the token chosen. Used from the engine thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // allowed[id] = 1 for every token that may come next, 0 otherwise (resized to the vocabulary).
  // End-of-generation tokens are not decided here but by can_end().
  virtual void allowed_tokens(std::vector<uint8_t>& allowed) = 0;
  // Whether generation may end now (the constrained text is complete).
  virtual bool can_end() const = 0;
  // The token that was sampled (never an end-of-generation token). Throws ember::Error if it was
  // not allowed.
  virtual void accept(int32_t token) = 0;
};

}  // namespace ember
