#include "ember/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "ember/core/error.h"
#include "ember/tokenizer/byte_level.h"

namespace ember {

// Open-addressing hash table from a pair of token ids to the merge they form. The merge loop
// looks up every adjacent pair, so this is the hot path of encoding words not yet cached.
struct BpeTokenizer::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  explicit MergeTable(size_t n) {
    size_t capacity = 16;
    while (capacity < n * 2) capacity *= 2;
    slots.resize(capacity);
    mask = capacity - 1;
  }

  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  size_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull >> 20) & mask; }

  // Keeps the first (lowest-ranked) rule for a pair, as llama.cpp does.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    const uint64_t key = key_of(left, right);
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return;
      if (slots[i].key == kEmpty) {
        slots[i] = {key, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t left, int32_t right) const {
    const uint64_t key = key_of(left, right);
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }

  std::vector<Slot> slots;
  size_t mask = 0;
};

// Ids of recently encoded pieces. Natural text repeats the same words constantly, so most pieces
// are answered from here without merging. Bounded: emptied once it holds too much.
struct BpeTokenizer::WordCache {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kMaxWords = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 128;

  std::mutex mutex;
  // piece -> (offset, count) into ids
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> words;
  std::vector<int32_t> ids;
};

namespace {

std::string where(const std::string& source) {
  return source.empty() ? std::string("BPE tokenizer") : source;
}

}  // namespace

BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer::BpeTokenizer(BpeVocab vocab) : vocab_(std::move(vocab)) {
  validate_vocab();
  build_index();
  build_token_bytes();
  build_merges();
  build_added_tokens();
  cache_ = std::make_unique<WordCache>();
}

void BpeTokenizer::validate_vocab() {
  const std::string src = where(vocab_.source);
  const size_t n = vocab_.tokens.size();
  if (n == 0) throw Error::in_file(ErrorKind::InvalidFile, src, "empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) {
    throw Error::in_file(ErrorKind::InvalidFile, src, "vocabulary too large");
  }
  if (vocab_.kinds.empty()) vocab_.kinds.assign(n, BpeTokenKind::Normal);
  if (vocab_.kinds.size() != n) {
    throw Error::in_file(
        ErrorKind::InvalidFile, src,
        std::to_string(vocab_.kinds.size()) + " token types for " + std::to_string(n) + " tokens");
  }
  const auto valid_or_none = [n](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < n ? id : -1;
  };
  vocab_.bos_id = valid_or_none(vocab_.bos_id);
  vocab_.eos_id = valid_or_none(vocab_.eos_id);
  vocab_.unk_id = valid_or_none(vocab_.unk_id);
}

void BpeTokenizer::build_index() {
  const size_t n = vocab_.tokens.size();
  // Normal tokens own their spelling: if an added token shares it, merging still finds the
  // normal one (added tokens are reached through the splitter).
  index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const auto [it, inserted] = index_.emplace(vocab_.tokens[i], id);
    if (!inserted && vocab_.kinds[i] == BpeTokenKind::Normal &&
        vocab_.kinds[it->second] != BpeTokenKind::Normal) {
      it->second = id;
    }
  }
}

// Each token's text as bytes (byte-level vocabularies spell bytes as printable characters), and
// the token of every single byte.
void BpeTokenizer::build_token_bytes() {
  const size_t n = vocab_.tokens.size();
  const bool byte_level = vocab_.pretokenizer.has_byte_level();
  bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = vocab_.tokens[i];
    switch (vocab_.kinds[i]) {
      case BpeTokenKind::Control:
      case BpeTokenKind::Unknown:
        break;  // no text of their own
      case BpeTokenKind::UserDefined:
        bytes_[i] = t;
        break;
      default:
        if (byte_level) {
          std::optional<std::string> raw = byte_level::decode(t);
          bytes_[i] = raw ? std::move(*raw) : t;
        } else {
          bytes_[i] = t;
        }
        break;
    }
  }
  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = find_token(byte_level::byte_to_utf8(static_cast<uint8_t>(b)));
  }
}

void BpeTokenizer::build_merges() {
  const std::string src = where(vocab_.source);
  merges_ = std::make_unique<MergeTable>(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto& [a, b] = vocab_.merges[rank];
    const int32_t left = find_token(a);
    const int32_t right = find_token(b);
    const int32_t merged = find_token(a + b);
    if (left < 0 || right < 0 || merged < 0) {
      if (!vocab_.strict_merges) continue;  // can never apply: drop it
      const std::string& missing = left < 0 ? a : right < 0 ? b : a + b;
      throw Error::in_file(ErrorKind::InvalidFile, src,
                           "merge " + std::to_string(rank) + " '" + a + " " + b +
                               "' names token '" + missing + "', which is not in the vocabulary");
    }
    merges_->insert(left, right, static_cast<int32_t>(rank), merged);
  }
}

// Added tokens as given, else every control / unknown / user-defined token of the vocabulary.
void BpeTokenizer::build_added_tokens() {
  const std::string src = where(vocab_.source);
  const size_t n = vocab_.tokens.size();
  std::vector<AddedToken> added = std::move(vocab_.added_tokens);
  vocab_.added_tokens.clear();
  if (added.empty()) {
    for (size_t i = 0; i < n; ++i) {
      const BpeTokenKind k = vocab_.kinds[i];
      if (k == BpeTokenKind::Control || k == BpeTokenKind::Unknown ||
          k == BpeTokenKind::UserDefined) {
        AddedToken t;
        t.content = vocab_.tokens[i];
        t.id = static_cast<int32_t>(i);
        t.special = k != BpeTokenKind::UserDefined;
        added.push_back(std::move(t));
      }
    }
  }
  for (const AddedToken& t : added) {
    if (t.id < 0 || static_cast<size_t>(t.id) >= n) {
      throw Error::in_file(ErrorKind::InvalidFile, src,
                           "added token '" + t.content + "' has id " + std::to_string(t.id) +
                               " outside the vocabulary [0, " + std::to_string(n) + ")");
    }
  }
  added_ = AddedTokenSplitter(std::move(added));
}

const std::string& BpeTokenizer::piece(int32_t id) const {
  check_token_id(id);
  return vocab_.tokens[id];
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  check_token_id(id);
  return bytes_[id];
}

std::string BpeTokenizer::token_text(int32_t id, bool render_special) const {
  check_token_id(id);
  const BpeTokenKind k = vocab_.kinds[id];
  if (render_special && (k == BpeTokenKind::Control || k == BpeTokenKind::Unknown)) {
    return vocab_.tokens[id];
  }
  return bytes_[id];
}

BpeTokenKind BpeTokenizer::token_kind(int32_t id) const {
  check_token_id(id);
  return vocab_.kinds[id];
}

int32_t BpeTokenizer::find_token(std::string_view spelling) const {
  const auto it = index_.find(spelling);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos) const {
  return encode_with_special(text, add_bos, /*parse_special=*/false);
}

std::vector<int32_t> BpeTokenizer::encode_with_special(std::string_view text, bool add_bos,
                                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  if (added_.empty()) {
    encode_plain(text, out);
    return out;
  }
  for (const TextSegment& seg : added_.split(text, parse_special)) {
    if (seg.token >= 0) {
      out.push_back(seg.token);
    } else {
      encode_plain(seg.text, out);
    }
  }
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  PretokenizedText pieces;
  vocab_.pretokenizer.run(text, pieces);
  for (size_t i = 0; i < pieces.pieces.size(); ++i) {
    encode_piece(pieces.piece(i), pieces.needs_byte_level, out);
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, bool raw_bytes,
                                std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  // One byte (or one character) is a single symbol: nothing to merge, nothing worth caching.
  if (raw_bytes && piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab_.unk_id >= 0) {
      out.push_back(vocab_.unk_id);
    }
    return;
  }
  const bool cacheable = piece.size() <= WordCache::kMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->words.find(piece);
    if (it != cache_->words.end()) {
      const auto [offset, count] = it->second;
      out.insert(out.end(), cache_->ids.begin() + offset, cache_->ids.begin() + offset + count);
      return;
    }
  }
  const size_t first = out.size();
  merge_piece(piece, raw_bytes, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() >= WordCache::kMaxWords) {
      cache_->words.clear();
      cache_->ids.clear();
    }
    const auto offset = static_cast<uint32_t>(cache_->ids.size());
    cache_->ids.insert(cache_->ids.end(), out.begin() + first, out.end());
    cache_->words.emplace(std::string(piece),
                          std::make_pair(offset, static_cast<uint32_t>(out.size() - first)));
  }
}

namespace {

// A symbol of the piece being merged: a token id plus its neighbours in the live list.
struct Symbol {
  int32_t id;  // kDead: merged into its left neighbour
  int32_t prev;
  int32_t next;
};
constexpr int32_t kDead = INT32_MIN;

// A candidate merge of symbols `left` and `right` (its right neighbour when queued). Entries go
// stale when either side changes; they are recognised by their ids and skipped when popped.
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t merged;
};

// Lowest rank first; among equal ranks the leftmost pair (HF tokenizers and llama.cpp agree).
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

}  // namespace

void BpeTokenizer::merge_piece(std::string_view piece, bool raw_bytes,
                               std::vector<int32_t>& out) const {
  if (vocab_.ignore_merges) {
    const int32_t whole = raw_bytes ? find_token(byte_level::encode(piece)) : find_token(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  // A character with no token becomes <unk> when there is one and is dropped otherwise, its
  // neighbours then being adjacent for merging (HF's BPE model; SmolLM2, for one, has no token
  // for bytes that never occur in UTF-8, such as 0xFF).
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  const auto add_symbol = [&](int32_t id) {
    if (id < 0) id = vocab_.unk_id;
    if (id >= 0) symbols.push_back({id, 0, 0});
  };
  if (raw_bytes) {
    for (char c : piece) add_symbol(byte_ids_[static_cast<uint8_t>(c)]);
  } else {
    for (size_t pos = 0; pos < piece.size();) {
      const size_t len = byte_level::utf8_char_len(piece, pos);
      add_symbol(find_token(piece.substr(pos, len)));
      pos += len;
    }
  }
  const auto count = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < count; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < count ? i + 1 : -1;
  }

  // Every merge queues at most two new candidates, so a piece of n symbols costs O(n log n)
  // rather than a rescan of all pairs after each merge.
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  const auto try_queue = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = symbols[left].id;
    const int32_t b = symbols[right].id;
    const MergeTable::Slot* m = merges_->find(a, b);
    if (m != nullptr) queue.push({m->rank, left, right, a, b, m->merged});
  };
  for (int32_t i = 0; i + 1 < count; ++i) try_queue(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = kDead;
    try_queue(left.prev, c.left);
    try_queue(c.left, left.next);
  }

  for (int32_t i = count > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace ember
