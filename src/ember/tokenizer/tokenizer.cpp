#include "ember/tokenizer/tokenizer.h"

#include <string>

#include "ember/core/error.h"

namespace ember {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  const int32_t bos = bos_id();
  // SentencePiece's dummy prefix: encode() put a space before the text, so the first piece of a
  // sequence (or of the text after a BOS) begins with a '▁' the user never typed.
  bool at_start = true;
  for (int32_t id : ids) {
    if (id == bos && bos >= 0) {
      at_start = true;
      continue;
    }
    std::string bytes = token_bytes(id);
    if (bytes.empty()) continue;  // control tokens leave the start-of-text state as it was
    if (at_start && strip_space_after_bos() && bytes.front() == ' ') bytes.erase(0, 1);
    at_start = false;
    out += bytes;
  }
  return out;
}

void Tokenizer::check_token_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(vocab_size()) + ")");
  }
}

}  // namespace ember
