// `ember tokenize` on llama.cpp's vocab-only GGUFs: files with a tokenizer and no weights, of
// architectures ember cannot run (falcon, gpt2, starcoder2, ...). The command reads only the
// tokenizer, so every one of them must work, and give llama.cpp's ids for the first test string.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> vocab_ggufs(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) == 0 && entry.path().extension() == ".gguf") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The first test string of a .inp file (strings end at "\n__ggml_vocab_test__\n") and the first
// line of its .out file, ids normalised to single spaces.
struct FirstCase {
  std::string text;
  std::string ids;
};

FirstCase first_case(const fs::path& gguf) {
  const std::string inp = read_file(gguf.string() + ".inp");
  FirstCase c;
  c.text = inp.substr(0, inp.find("\n__ggml_vocab_test__\n"));
  std::istringstream out(read_file(gguf.string() + ".out"));
  std::string line;
  std::getline(out, line);
  std::istringstream ids(line);
  for (std::string id; ids >> id;) c.ids += (c.ids.empty() ? "" : " ") + id;
  return c;
}

TEST(CliTokenizeVocab, EveryVocabOnlyGgufTokenizes) {
  const fs::path dir = test::fixture("tokenizer-tests");
  EMBER_REQUIRE_FIXTURE(dir);
  const std::vector<fs::path> files = vocab_ggufs(dir);
  if (files.empty()) GTEST_SKIP() << "no ggml-vocab-*.gguf in " << dir;
  size_t compared = 0;
  for (const fs::path& gguf : files) {
    SCOPED_TRACE(gguf.filename().string());
    const std::string m = "tokenize -m " + test::shell_quote(gguf.string());
    const auto plain = test::run_ember(m + " --ids -p 'Hello world'");
    EXPECT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_FALSE(plain.out.empty());
    if (!fs::exists(gguf.string() + ".inp") || !fs::exists(gguf.string() + ".out")) continue;
    // llama.cpp's expected ids are encoded without BOS.
    const FirstCase c = first_case(gguf);
    const auto r = test::run_ember(m + " --ids --no-bos -p " + test::shell_quote(c.text));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c.ids + "\n") << "text: " << c.text;
    ++compared;
  }
  std::printf("[ tokenize ] %zu vocab GGUFs, %zu compared with their .out\n", files.size(),
              compared);
  EXPECT_GT(compared, 0u);
}

}  // namespace
}  // namespace ember
