#include "ember/engine/detokenizer.h"

#include <utility>

namespace ember {

Detokenizer::Detokenizer(const Tokenizer* tokenizer, std::vector<std::string> stops,
                         bool strip_leading_space)
    : tokenizer_(tokenizer), stop_(std::move(stops)), strip_leading_space_(strip_leading_space) {}

std::string Detokenizer::push(int32_t token, bool* stopped) {
  *stopped = stop_.matched();
  if (tokenizer_ == nullptr || *stopped) return {};
  std::string bytes = tokenizer_->token_bytes(token);
  if (strip_leading_space_ && !bytes.empty()) {
    if (bytes[0] == ' ') bytes.erase(0, 1);
    strip_leading_space_ = false;
  }
  return stop_.push(utf8_.push(bytes), stopped);
}

std::string Detokenizer::flush() {
  if (stop_.matched()) return {};
  bool stopped = false;
  std::string text = stop_.push(utf8_.flush(), &stopped);
  if (!stopped) text += stop_.flush();
  return text;
}

}  // namespace ember
