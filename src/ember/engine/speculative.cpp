#include "ember/engine/speculative.h"

#include <algorithm>

namespace ember {

std::string SpeculativeOptions::proposer_name() const {
  if (!uses_draft()) return "prompt lookup";
  if (draft_layers <= 0) return draft_label;
  return draft_label + ", first " + std::to_string(draft_layers) + " layers";
}

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
      // The continuation reads on past the end into the guesses themselves: a loop of period
      // size - n - p (the text repeating itself) is guessed a whole k ahead.
      std::vector<int32_t> draft;
      for (int64_t i = p + n; static_cast<int64_t>(draft.size()) < max_draft; ++i) {
        draft.push_back(i < size ? tokens[static_cast<size_t>(i)]
                                 : draft[static_cast<size_t>(i - size)]);
      }
      return draft;
    }
  }
  return {};
}

}  // namespace ember
