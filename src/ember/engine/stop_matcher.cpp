#include "ember/engine/stop_matcher.h"

#include <algorithm>

namespace ember {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text, bool* matched) {
  if (matched_) {
    *matched = true;
    return "";
  }
  pending_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    matched_ = true;
    *matched = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  *matched = false;
  // Hold back the longest tail of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (matched_) return "";
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace ember
