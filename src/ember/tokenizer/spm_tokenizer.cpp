#include "ember/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <queue>
#include <utility>

#include "ember/core/error.h"

namespace ember {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 '▁'

// Byte length of the UTF-8 character a lead byte announces, from its top four bits. Continuation
// and invalid lead bytes count as one byte, so malformed input still splits into symbols (which
// then go through byte fallback) instead of failing — the same rule llama.cpp uses.
size_t utf8_char_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a "<0xNN>" piece stands for, or -1 if the piece has another shape.
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  const int hi = hex_digit(p[3]);
  const int lo = hex_digit(p[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

std::string unescape_spaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t pos = 0;
  while (pos < piece.size()) {
    if (piece.substr(pos, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(piece[pos++]);
    }
  }
  return out;
}

// One symbol of the segmentation: a byte range of the escaped text plus doubly-linked neighbours.
// A symbol merged into its left neighbour keeps length 0 and drops out of the list.
struct Symbol {
  size_t begin;
  size_t length;
  int64_t prev;
  int64_t next;
};

// A candidate merge of two adjacent symbols. `length` is the combined length when the candidate
// was queued: if either side has changed since, the entry is stale and skipped when popped.
struct Bigram {
  float score;
  int64_t left;
  int64_t right;
  size_t length;
  int32_t token;
};

// Highest score first; among equal scores the leftmost pair first (llama.cpp / SentencePiece).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(SpmVocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.pieces.size();
  if (n == 0) throw Error(ErrorKind::InvalidFile, "SPM tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorKind::InvalidFile, "SPM tokenizer: vocabulary too large");
  if (vocab_.scores.size() != n) {
    throw Error(ErrorKind::InvalidFile, "SPM tokenizer: " + std::to_string(vocab_.scores.size()) +
                                            " scores for " + std::to_string(n) + " tokens");
  }
  if (vocab_.types.empty()) vocab_.types.assign(n, SpmTokenType::Normal);
  if (vocab_.types.size() != n) {
    throw Error(ErrorKind::InvalidFile, "SPM tokenizer: " + std::to_string(vocab_.types.size()) +
                                            " token types for " + std::to_string(n) + " tokens");
  }
  const auto valid_or_none = [n](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < n ? id : -1;
  };
  vocab_.bos_id = valid_or_none(vocab_.bos_id);
  vocab_.eos_id = valid_or_none(vocab_.eos_id);
  vocab_.unk_id = valid_or_none(vocab_.unk_id);

  index_.reserve(n);
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = vocab_.pieces[i];
    // Duplicate spellings: the later id wins, as in llama.cpp's token_to_id map.
    index_[std::string_view(p)] = static_cast<int32_t>(i);
    switch (vocab_.types[i]) {
      case SpmTokenType::Control:
      case SpmTokenType::Unknown:
      case SpmTokenType::Unused:
        break;  // no text of their own
      case SpmTokenType::Byte: {
        const int b = parse_byte_piece(p);
        bytes_[i] = b >= 0 ? std::string(1, static_cast<char>(b)) : unescape_spaces(p);
        break;
      }
      default:
        bytes_[i] = unescape_spaces(p);
        break;
    }
  }

  // Byte fallback: "<0xNN>" (uppercase hex, as SentencePiece writes it); failing that a piece that
  // is the byte itself; failing that <unk>.
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = find_piece(name);
    if (id < 0) id = find_piece(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id >= 0 ? id : vocab_.unk_id;
  }
}

const std::string& SpmTokenizer::piece(int32_t id) const {
  check_token_id(id);
  return vocab_.pieces[id];
}

std::string SpmTokenizer::token_bytes(int32_t id) const {
  check_token_id(id);
  return bytes_[id];
}

float SpmTokenizer::score(int32_t id) const {
  check_token_id(id);
  return vocab_.scores[id];
}

SpmTokenType SpmTokenizer::token_type(int32_t id) const {
  check_token_id(id);
  return vocab_.types[id];
}

int32_t SpmTokenizer::find_piece(std::string_view piece_text) const {
  const auto it = index_.find(piece_text);
  return it == index_.end() ? -1 : it->second;
}

int32_t SpmTokenizer::segment_token(std::string_view text) const {
  const int32_t id = find_piece(text);
  if (id < 0) return -1;
  switch (vocab_.types[id]) {
    case SpmTokenType::Control:
    case SpmTokenType::Unknown:
    case SpmTokenType::Byte:
      return -1;
    default:
      return id;
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  // SentencePiece encodes "" as nothing at all (not as a lone dummy-prefix '▁').
  if (text.empty()) return out;

  std::string escaped;
  escaped.reserve(text.size() + 3 * 8);
  if (vocab_.add_space_prefix) escaped.append(kSpaceMarker);
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceMarker);
    } else {
      escaped.push_back(c);
    }
  }
  encode_fragment(escaped, out);
  return out;
}

void SpmTokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const auto index = static_cast<int64_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, pos + len == text.size() ? -1 : index + 1});
    pos += len;
  }

  // Best merge first. Each merge queues at most two new candidates, so the whole loop is
  // O(n log n) in the number of characters rather than rescanning all pairs after every merge.
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::vector<int32_t> symbol_token(symbols.size(), -1);  // token of a merged symbol
  const auto try_add = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const int32_t token = segment_token(text.substr(symbols[left].begin, length));
    if (token < 0) return;
    queue.push({vocab_.scores[token], left, right, length, token});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int64_t>(i) - 1, static_cast<int64_t>(i));
  }

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale: one side was merged away, or grew by merging with another neighbour.
    if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    symbol_token[top.left] = top.token;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  for (int64_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    int32_t token = symbol_token[i];
    if (token < 0) token = segment_token(text.substr(s.begin, s.length));  // single character
    if (token >= 0) {
      out.push_back(token);
      continue;
    }
    for (size_t k = 0; k < s.length; ++k) {
      const int32_t b = byte_tokens_[static_cast<uint8_t>(text[s.begin + k])];
      if (b >= 0) out.push_back(b);
    }
  }
}

}  // namespace ember
