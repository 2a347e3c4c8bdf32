// Added tokens (special/control tokens such as <|im_start|>, and user-defined added tokens) are
// cut out of the text before any pre-tokenization or merging, so "<|im_end|>" typed in a chat
// template becomes one id rather than the pieces of its spelling. Shared by every tokenizer
// model: the splitter only knows token strings and ids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// One added token, with HF tokenizers' AddedToken flags.
struct AddedToken {
  std::string content;  // literal text
  int32_t id = -1;
  bool special = false;      // control token: only matched when special parsing is on
  bool lstrip = false;       // the match swallows whitespace to its left
  bool rstrip = false;       // ... and to its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched against normalized text (no normalizer here: raw text)
};

// A run of plain text (token == -1) or one added token and the text span it consumed.
struct TextSegment {
  std::string_view text;
  int32_t token = -1;
};

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  // Empty contents and negative ids are ignored.
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits `text` at added-token occurrences, leftmost first and, among tokens starting at the
  // same byte, the longest. With `parse_special` false, special tokens are left in the text
  // (non-special added tokens still split, as in HF tokenizers and llama.cpp). Segments view
  // `text`; empty text segments are omitted.
  std::vector<TextSegment> split(std::string_view text, bool parse_special) const;

 private:
  // Whether the token `t` matching at [begin, end) of `text` is acceptable there.
  bool accepts(const AddedToken& t, std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte of the content, longest content first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace ember
