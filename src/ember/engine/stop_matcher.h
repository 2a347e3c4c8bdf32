// Stop strings across token boundaries: text is pushed as it is generated; push() returns what is
// safe to show now, holding back any tail that could still grow into a stop string. When a stop
// string appears, everything before it is released and the rest (stop string included) dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ember {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Appends `text`; returns the text that can be emitted. Sets `*matched` once a stop string has
  // been seen (after which push() returns "").
  std::string push(std::string_view text, bool* matched);
  // End of generation without a match: whatever was held back.
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
};

}  // namespace ember
