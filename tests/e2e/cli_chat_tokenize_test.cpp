// `ember tokenize` and `ember chat` end to end.
#include <gtest/gtest.h>

#include <regex>

#include "test_util.h"

namespace ember {
namespace {

TEST(CliTokenize, SmolLM2EncodingsAndSpecialTokens) {
  auto dir = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(dir / "tokenizer.json");
  auto m = "-m " + test::shell_quote(dir.string());
  auto r = test::run_ember("tokenize " + m + " --ids --no-bos -p 'The capital of France is'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "504 3575 282 4649 314\n");
  auto special = test::run_ember("tokenize " + m + " --ids --no-bos --special -p " +
                                 test::shell_quote("<|im_start|>user\nhi<|im_end|>\n"));
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out.rfind("1 ", 0), 0u) << special.out;
  EXPECT_NE(special.out.find(" 2 198\n"), std::string::npos) << special.out;
  auto plain = test::run_ember("tokenize " + m + " --ids --no-bos -p '<|im_start|>'");
  EXPECT_EQ(plain.out.find("1\n"), std::string::npos)
      << "without --special the marker is text: " << plain.out;
  auto pieces = test::run_ember("tokenize " + m + " --no-bos -p 'hi there'");
  EXPECT_NE(pieces.out.find("-> ' there'"), std::string::npos) << pieces.out;
}

TEST(CliTokenize, Stories260KFromGgufAndBinAgree) {
  auto gguf = test::fixture("models/stories260K/stories260K.gguf");
  auto bin = test::fixture("models/stories260K/stories260K.bin");
  EMBER_REQUIRE_FIXTURE(gguf);
  EMBER_REQUIRE_FIXTURE(bin);
  std::string text = " -p 'Lily saw a big, red ball. 123 emoji: \xF0\x9F\x98\x80'";
  auto a = test::run_ember("tokenize --ids -m " + test::shell_quote(gguf.string()) + text);
  auto b = test::run_ember("tokenize --ids -m " + test::shell_quote(bin.string()) + text);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.rfind("1 ", 0), 0u) << "BOS first: " << a.out;
}

TEST(CliChat, KeepsTheCacheBetweenTurns) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  // run_ember reads stdin from /dev/null, so pipe the turns in through the shell.
  std::string cmd = "printf 'Once upon a time\\nThe dog\\n/exit\\nignored\\n' | " +
                    test::shell_quote(test::ember_binary()) + " chat -m " +
                    test::shell_quote(model.string()) + " --temp 0 -n 20 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find(", there was a little girl named Lily"), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("turn 2: (\\d+) prompt tokens, (\\d+) reused")))
      << out;
  EXPECT_GT(std::stoi(m[2]), 0) << "the second turn reuses the first turn's cache";
  EXPECT_LT(std::stoi(m[2]), std::stoi(m[1]));
  EXPECT_EQ(out.find("turn 3"), std::string::npos) << "/exit ends the chat";
}

}  // namespace
}  // namespace ember
