// Streaming detokenizer helper: tokens arrive as byte strings that may split a UTF-8 character;
// push() returns only complete characters and holds back an incomplete tail until the next push.
// Invalid sequences are emitted as U+FFFD so the output is always valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace ember {

class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);
  // Whatever is still held back at end of stream, with an incomplete tail as U+FFFD.
  std::string flush();

 private:
  std::string pending_;
};

// Length of the longest prefix of `s` that consists of complete UTF-8 sequences, treating invalid
// bytes as complete one-byte sequences; an incomplete (but so far valid) tail is excluded.
size_t utf8_complete_prefix(std::string_view s);
// Replaces invalid UTF-8 in `s` with U+FFFD.
std::string utf8_sanitize(std::string_view s);

}  // namespace ember
