// `ember score`: perplexity and --logits-out on stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include "test_util.h"

namespace ember {
namespace {

TEST(CliScore, PerplexityAndLogitsFile) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  auto dir = test::scratch_dir("score");
  auto logits = dir / "logits.bin";
  auto r =
      test::run_ember("score -m " + test::shell_quote(model.string()) +
                      " -p 'Once upon a time, there was a little girl named Lily.' --logits-out " +
                      test::shell_quote(logits.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex("tokens (\\d+), scored (\\d+), mean nll ([0-9.]+), perplexity ([0-9.]+)")))
      << r.out;
  int n_tokens = std::stoi(m[1]);
  double ppl = std::stod(m[4]);
  EXPECT_EQ(std::stoi(m[2]), n_tokens - 1);
  // The model was trained on exactly this kind of text: far better than uniform over 512 tokens.
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 20.0);
  ASSERT_TRUE(std::filesystem::exists(logits));
  EXPECT_EQ(std::filesystem::file_size(logits), static_cast<uintmax_t>(n_tokens) * 512 * 4);

  // The perplexity recomputed from the logits file agrees with the printed one.
  std::ifstream in(logits, std::ios::binary);
  std::vector<float> z(static_cast<size_t>(n_tokens) * 512);
  in.read(reinterpret_cast<char*>(z.data()), static_cast<std::streamsize>(z.size() * 4));
  auto ids_run = test::run_ember("score -m " + test::shell_quote(model.string()) +
                                 " -p 'Once upon a time, there was a little girl named Lily.'");
  ASSERT_EQ(ids_run.exit_code, 0);
  std::vector<int> ids;
  std::stringstream lines(ids_run.out);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::smatch row;
    if (std::regex_search(line, row, std::regex("^\\s*(\\d+)\\s+(\\d+)\\s")))
      ids.push_back(std::stoi(row[2]));
  }
  ASSERT_EQ(static_cast<int>(ids.size()), n_tokens - 1);
  double nll = 0;
  for (int i = 0; i + 1 < n_tokens; ++i) {
    const float* row = z.data() + static_cast<size_t>(i) * 512;
    double mx = row[0], s = 0;
    for (int v = 1; v < 512; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < 512; ++v) s += std::exp(row[v] - mx);
    nll += std::log(s) + mx - row[ids[static_cast<size_t>(i)]];
  }
  EXPECT_NEAR(std::exp(nll / (n_tokens - 1)), ppl, 1e-3 * ppl);
}

TEST(CliScore, IdsNeedNoTokenizerAndBadIdsAreRejected) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  auto ok =
      test::run_ember("score -m " + test::shell_quote(model.string()) + " --ids 1,403,407,261 -q");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("tokens 4, scored 3"), std::string::npos) << ok.out;
  auto bad = test::run_ember("score -m " + test::shell_quote(model.string()) + " --ids 1,99999");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("outside the vocabulary"), std::string::npos) << bad.err;
  auto junk = test::run_ember("score -m " + test::shell_quote(model.string()) + " --ids 1,x");
  EXPECT_NE(junk.exit_code, 0);
  EXPECT_NE(junk.err.find("not a token id"), std::string::npos) << junk.err;
}

}  // namespace
}  // namespace ember
