#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/tokenizer/utf8_stream.h"

namespace ember {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Pushes `text` one byte at a time and returns what came out after each push.
std::vector<std::string> push_bytewise(Utf8StreamDecoder& d, const std::string& text) {
  std::vector<std::string> outs;
  for (char c : text) outs.push_back(d.push(std::string(1, c)));
  return outs;
}

TEST(Utf8Stream, AsciiPassesThroughImmediately) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("Hello"), "Hello");
  EXPECT_EQ(d.push(""), "");
  EXPECT_EQ(d.push(" world"), " world");
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8Stream, MultiByteCharactersSplitAcrossPushes) {
  // 2-byte (é), 3-byte (€, ▁), 4-byte (😀 U+1F600) characters, each fed one byte per push: the
  // character appears whole on the push that completes it and nothing is emitted before.
  for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xE2\x96\x81", "\xF0\x9F\x98\x80"}) {
    Utf8StreamDecoder d;
    std::vector<std::string> outs = push_bytewise(d, ch);
    for (size_t i = 0; i + 1 < outs.size(); ++i) EXPECT_EQ(outs[i], "") << "byte " << i;
    EXPECT_EQ(outs.back(), ch);
    EXPECT_EQ(d.flush(), "");
  }
}

TEST(Utf8Stream, SplitInsideTextKeepsCompletePrefix) {
  Utf8StreamDecoder d;
  // "a€b" with the € split 1 + 2 bytes across pushes.
  EXPECT_EQ(d.push("a\xE2"), "a");
  EXPECT_EQ(d.push("\x82\xACz"), "\xE2\x82\xACz");
  // Emoji split 2 + 2, preceded by text in the same push.
  EXPECT_EQ(d.push("xy\xF0\x9F"), "xy");
  EXPECT_EQ(d.push("\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8Stream, ConcatenationOfArbitrarySplitsEqualsInput) {
  const std::string text = "Grüße, 世界! 🙂👍🏽 — ok";
  for (size_t step = 1; step <= 5; ++step) {
    Utf8StreamDecoder d;
    std::string out;
    for (size_t pos = 0; pos < text.size(); pos += step) out += d.push(text.substr(pos, step));
    out += d.flush();
    EXPECT_EQ(out, text) << "step " << step;
  }
}

TEST(Utf8Stream, InvalidBytesBecomeReplacementCharacter) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("a\xFFz"), "a" + kFffd + "z");            // never valid in UTF-8
  EXPECT_EQ(d.push("\x80"), kFffd);                          // stray continuation byte
  EXPECT_EQ(d.push("\xC0\xAF"), kFffd + kFffd);              // overlong encoding of '/'
  EXPECT_EQ(d.push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // UTF-16 surrogate
  // A lead byte whose continuation turns out wrong: one U+FFFD, then the next character intact.
  EXPECT_EQ(d.push("\xE2\x82"), "");
  EXPECT_EQ(d.push("X"), kFffd + "X");
  EXPECT_EQ(d.flush(), "");
}

TEST(Utf8Stream, FlushReplacesIncompleteTail) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("ok\xF0\x9F\x98"), "ok");
  EXPECT_EQ(d.flush(), kFffd);
  EXPECT_EQ(d.flush(), "");                   // nothing left after a flush
  EXPECT_EQ(d.push("\xC3\xA9"), "\xC3\xA9");  // and the decoder is reusable
}

TEST(Utf8Stream, CompletePrefixAndSanitize) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // invalid bytes count as complete
  EXPECT_EQ(utf8_complete_prefix("\xF0"), 0u);
  EXPECT_EQ(utf8_sanitize("plain \xE2\x82\xAC"), "plain \xE2\x82\xAC");
  EXPECT_EQ(utf8_sanitize("a\xFEz\xC3"), "a" + kFffd + "z" + kFffd);
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
}

}  // namespace
}  // namespace ember
