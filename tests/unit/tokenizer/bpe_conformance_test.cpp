// llama.cpp's byte-level BPE conformance suites (expected ids from HF tokenizers): every string
// must encode to exactly the expected ids, and decode back to itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "ember/formats/gguf.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "test_util.h"
#include "unit/tokenizer/bpe_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

struct VocabCase {
  std::string text;
  std::vector<int32_t> expected;
};

// The .inp file is the test strings each followed by "\n__ggml_vocab_test__\n" (a string may
// itself be empty or end in newlines: only the separator line delimits it); the .out file has one
// line of space-separated ids per string, in order (an empty line for the empty string).
std::vector<VocabCase> read_cases(const fs::path& inp, const fs::path& out, std::string& error) {
  const std::string text = test::read_text_file(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  for (size_t next; (next = text.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    cases.push_back({text.substr(pos, next - pos), {}});
  }
  if (pos != text.size()) error = "trailing text after the last separator in " + inp.string();
  std::istringstream lines(test::read_text_file(out));
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    if (i >= cases.size()) continue;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].expected.push_back(id);
  }
  if (i != cases.size()) {
    error = std::to_string(i) + " lines in " + out.string() + " but " +
            std::to_string(cases.size()) + " strings in " + inp.string();
  }
  return cases;
}

void run_suite(const std::string& name) {
  const fs::path dir = test::fixture("tokenizer-tests");
  const fs::path gguf_path = dir / ("ggml-vocab-" + name + ".gguf");
  if (!fs::exists(gguf_path)) {
    GTEST_SKIP() << "fixture not found: " << gguf_path
                 << " (set EMBER_FIXTURES to the shared fixtures directory)";
  }
  GgufFile gguf(gguf_path.string());
  const auto tok = load_gguf_bpe_tokenizer(gguf);
  std::string error;
  const auto cases = read_cases(fs::path(gguf_path.string() + ".inp"),
                                fs::path(gguf_path.string() + ".out"), error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_GE(cases.size(), 40u);

  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const VocabCase& c = cases[i];
    const std::vector<int32_t> actual = tok->encode(c.text, /*add_bos=*/false);
    if (actual == c.expected) {
      ++passed;
    } else {
      ADD_FAILURE() << name << " string " << i << ": \"" << test::escape_bytes(c.text)
                    << "\"\n  expected: " << test::join_ids(c.expected)
                    << "\n  actual:   " << test::join_ids(actual);
    }
    EXPECT_EQ(tok->decode(actual), c.text) << name << " round trip of string " << i;
  }
  std::printf("[ %s ] %zu/%zu strings encode exactly\n", name.c_str(), passed, cases.size());
  EXPECT_EQ(passed, cases.size());
}

TEST(BpeConformance, Gpt2) {
  run_suite("gpt-2");
}
TEST(BpeConformance, Starcoder) {
  run_suite("starcoder");
}
TEST(BpeConformance, Falcon) {
  run_suite("falcon");
}
TEST(BpeConformance, DeepseekCoder) {
  run_suite("deepseek-coder");
}

TEST(BpeConformance, VocabularyMetadata) {
  const fs::path path = test::fixture("tokenizer-tests/ggml-vocab-gpt-2.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  GgufFile gguf(path.string());
  const auto tok = load_gguf_bpe_tokenizer(gguf);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_FALSE(tok->strip_space_after_bos());
  // "Ġ" is GPT-2's spelling of a space.
  const std::vector<int32_t> ids = tok->encode(" ", false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tok->piece(ids[0]), "\xC4\xA0");
  EXPECT_EQ(tok->token_bytes(ids[0]), " ");
}

}  // namespace
}  // namespace ember
