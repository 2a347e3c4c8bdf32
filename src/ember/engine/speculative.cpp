#include "ember/engine/speculative.h"

#include <algorithm>

namespace ember {

std::vector<int32_t> propose_lookup(std::span<const int32_t> tokens, int32_t max_ngram,
                                    int64_t max_draft) {
  const auto size = static_cast<int64_t>(tokens.size());
  if (max_draft <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_ngram, size - 1); n >= 1; --n) {
    const auto tail = tokens.subspan(static_cast<size_t>(size - n));
    // Latest occurrence first: a match at p covers [p, p + n), and its continuation starts at
    // p + n, which must lie before the end (the tail itself is no match).
    for (int64_t p = size - n - 1; p >= 0; --p) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + p)) continue;
      const int64_t from = p + n, to = std::min(size, from + max_draft);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

}  // namespace ember
