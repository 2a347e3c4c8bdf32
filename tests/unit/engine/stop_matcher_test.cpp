#include <gtest/gtest.h>

#include "ember/engine/stop_matcher.h"

namespace ember {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces, bool* matched) {
  std::string out;
  for (const auto& p : pieces) {
    out += m.push(p, matched);
    if (*matched) return out;
  }
  return out + m.flush();
}

TEST(StopMatcher, MatchesAcrossPieceBoundariesAndDropsTheStop) {
  StopMatcher m({"END"});
  bool matched = false;
  EXPECT_EQ(feed(m, {"hello E", "N", "D and more"}, &matched), "hello ");
  EXPECT_TRUE(matched);
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStillMatch) {
  StopMatcher m({"\n\n", "###"});
  bool matched = false;
  EXPECT_EQ(m.push("abc#", &matched), "abc");
  EXPECT_EQ(m.push("#x", &matched), "##x");  // "##x" can no longer become "###"
  EXPECT_EQ(m.push("\n", &matched), "");
  EXPECT_EQ(m.push("y", &matched), "\ny");
  EXPECT_FALSE(matched);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EarliestStopWinsAndNoStopsPassEverything) {
  StopMatcher m({"b", "abc"});
  bool matched = false;
  EXPECT_EQ(m.push("xxabcd", &matched), "xx");  // "abc" starts before "b"
  EXPECT_TRUE(matched);
  StopMatcher none;
  EXPECT_EQ(none.push("anything", &matched), "anything");
  EXPECT_FALSE(matched);
}

TEST(StopMatcher, FlushReleasesAHeldPrefixAtTheEnd) {
  StopMatcher m({"STOP"});
  bool matched = false;
  EXPECT_EQ(m.push("the ST", &matched), "the ");
  EXPECT_EQ(m.flush(), "ST");
}

}  // namespace
}  // namespace ember
