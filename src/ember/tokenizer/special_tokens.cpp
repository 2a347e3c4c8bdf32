#include "ember/tokenizer/special_tokens.h"

#include <algorithm>
#include <utility>

namespace ember {

namespace {

// Whitespace as HF's lstrip/rstrip see it (ASCII whitespace is all that templates produce).
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A byte that belongs to a word for single_word tokens: ASCII alphanumerics, '_', and any byte
// of a non-ASCII character (letters in most scripts).
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || u == '_' || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') ||
         (u >= 'A' && u <= 'Z');
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens) {
  for (AddedToken& t : tokens) {
    if (!t.content.empty() && t.id >= 0) tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(
        static_cast<uint32_t>(i));
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

bool AddedTokenSplitter::accepts(const AddedToken& t, std::string_view text, size_t begin,
                                 size_t end) const {
  if (!t.single_word) return true;
  if (begin > 0 && is_word_byte(text[begin - 1])) return false;
  if (end < text.size() && is_word_byte(text[end])) return false;
  return true;
}

std::vector<TextSegment> AddedTokenSplitter::split(std::string_view text,
                                                   bool parse_special) const {
  std::vector<TextSegment> out;
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (uint32_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (t.special && !parse_special) continue;
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (!accepts(t, text, pos, pos + t.content.size())) continue;
      found = &t;  // the list is longest first, so the first hit is the longest
      break;
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + found->content.size();
    if (found->lstrip) {
      while (begin > emitted && is_space(text[begin - 1])) --begin;
    }
    if (found->rstrip) {
      while (end < text.size() && is_space(text[end])) ++end;
    }
    if (begin > emitted) out.push_back({text.substr(emitted, begin - emitted), -1});
    out.push_back({text.substr(begin, end - begin), found->id});
    emitted = end;
    pos = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
  return out;
}

}  // namespace ember
