// `ember run` end to end on the real stories260K model, from both of its formats.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void expect_greedy_matches(const std::string& model_args) {
  auto expected_path = test::fixture("models/stories260K/expected-greedy-200.txt");
  EMBER_REQUIRE_FIXTURE(expected_path);
  std::string expected = read_text(expected_path);
  auto r = test::run_ember("run " + model_args + " --temp 0 -n 200");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string out = r.out;
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  ASSERT_GE(out.size(), expected.size()) << out;
  EXPECT_EQ(out.substr(0, expected.size()), expected) << "full output:\n" << out;
  EXPECT_NE(r.err.find("prompt tokens 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache in use"), std::string::npos) << r.err;
}

TEST(CliRun, GreedyStories260KFromGguf) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  expect_greedy_matches("-m " + test::shell_quote(model.string()));
}

TEST(CliRun, GreedyStories260KFromLlama2cBin) {
  auto model = test::fixture("models/stories260K/stories260K.bin");
  auto tok = test::fixture("models/stories260K/tok512.bin");
  EMBER_REQUIRE_FIXTURE(model);
  EMBER_REQUIRE_FIXTURE(tok);
  expect_greedy_matches("-m " + test::shell_quote(model.string()) + " --tokenizer " +
                        test::shell_quote(tok.string()));
  // tok512.bin beside the model is found without --tokenizer.
  expect_greedy_matches("-m " + test::shell_quote(model.string()));
}

// The whole greedy test with each kernel set forced through EMBER_ISA (one the CPU lacks falls
// back, with a warning, to the best set it runs; scalar is the portable reference path), and bench
// reports the set that ran.
TEST(CliRun, GreedyStories260KWithEachIsaForced) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  for (const auto& [name, isa] :
       {std::pair{"scalar", cpu::Isa::Scalar}, std::pair{"avx2", cpu::Isa::Avx2},
        std::pair{"avx512", cpu::Isa::Avx512}}) {
    SCOPED_TRACE(std::string("EMBER_ISA=") + name);
    cpu::Isa runs;  // what the dispatcher picks for this request on this CPU
    {
      test::IsaScope scope(isa);
      runs = cpu::active_isa();
    }
    ::setenv("EMBER_ISA", name, 1);
    expect_greedy_matches("-m " + test::shell_quote(model.string()));
    auto bench = test::run_ember("bench -m " + test::shell_quote(model.string()) +
                                 " -p 8 -n 4 -r 1 -t 1 --json");
    ::unsetenv("EMBER_ISA");
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    EXPECT_EQ(bench.err.find("unknown EMBER_ISA"), std::string::npos) << bench.err;
    EXPECT_NE(bench.out.find(std::string("\"isa\": \"") + cpu::isa_name(runs) + "\""),
              std::string::npos)
        << bench.out;
    if (runs != isa) {
      EXPECT_NE(bench.err.find("lacks"), std::string::npos) << bench.err;
    }
  }
}

// q8_0/q4_0 matrices are interleaved at load unless --no-interleave; bench reports which ran, and
// both generate.
TEST(CliRun, NoInterleaveKeepsTheFileLayout) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string()) + " --dtype q4_0";
  for (const char* flag : {"", " --no-interleave"}) {
    SCOPED_TRACE(flag);
    auto bench = test::run_ember("bench " + m + flag + " -p 8 -n 4 -r 1 -t 1 --json");
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    const std::string want =
        *flag == '\0' ? "\"layout\": \"interleaved8\"" : "\"layout\": \"rows\"";
    EXPECT_NE(bench.out.find(want), std::string::npos) << bench.out;
    auto run = test::run_ember("run " + m + flag + " -p 'Once upon a time' --temp 0 -n 20");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out.rfind("Once upon a time", 0), 0u) << run.out;
    EXPECT_GT(run.out.size(), std::string("Once upon a time").size() + 20) << run.out;
  }
}

// --no-mmap copies the matrices the default reads in place from the file (bench --json counts the
// copied bytes), and generates the same greedy text.
TEST(CliRun, NoMmapCopiesTheWeightsAndGeneratesTheSame) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string());
  auto copied_share = [&](const std::string& flag) {
    auto bench = test::run_ember("bench " + m + flag + " -p 8 -n 4 -r 1 -t 1 --json");
    EXPECT_EQ(bench.exit_code, 0) << bench.err;
    auto j = nlohmann::json::parse(bench.out);
    return j["matrix_bytes_copied"].get<double>() / j["matrix_bytes"].get<double>();
  };
  EXPECT_LT(copied_share(""), 0.5);  // only the permuted Q/K rows are copied by default
  EXPECT_EQ(copied_share(" --no-mmap"), 1.0);
  const std::string run = "run " + m + " -p 'Once upon a time' --temp 0 -n 16";
  auto mapped = test::run_ember(run);
  auto copied = test::run_ember(run + " --no-mmap");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.err;
  ASSERT_EQ(copied.exit_code, 0) << copied.err;
  EXPECT_EQ(copied.out, mapped.out);
}

// bench --probe measures the read bandwidth before each decode repetition (in the pages the
// weights sit in) and reports decode's weight stream against it, repetition by repetition.
TEST(CliRun, BenchProbeSetsDecodeAgainstTheReadBandwidth) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string());
  for (const char* flag : {"", " --no-mmap"}) {
    SCOPED_TRACE(flag);
    auto bench =
        test::run_ember("bench " + m + flag + " -p 0 -n 8 -r 2 -t 1 --probe --probe-mb 64 --json");
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    auto j = nlohmann::json::parse(bench.out);
    const auto& bw = j["bandwidth"];
    ASSERT_TRUE(bw.is_object()) << bench.out;
    EXPECT_EQ(bw["probe_pages"], *flag == '\0' ? "4KiB" : "2MiB");
    ASSERT_EQ(bw["probe_gbps"].size(), 2u);
    ASSERT_EQ(bw["fraction_of_probe"].size(), 2u);
    const auto runs = j["tg"]["runs"];
    const double bytes = j["matrix_bytes"].get<double>();
    for (size_t r = 0; r < 2; ++r) {
      const double probe = bw["probe_gbps"][r].get<double>();
      EXPECT_GT(probe, 0.1);
      // fraction = tok/s x bytes per token / probe, repetition by repetition.
      EXPECT_NEAR(bw["fraction_of_probe"][r].get<double>(),
                  runs[r].get<double>() * bytes / 1e9 / probe, 1e-9);
    }
  }
  auto bad = test::run_ember("bench " + m + " -p 0 -n 4 -r 1 --probe --probe-mb 0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--probe-mb must be >= 1"), std::string::npos) << bad.err;
}

// --kv-dtype f16 reaches the KV pool (bench reports it), generates the same greedy story start as
// the exact f32 cache on stories260K, and an unknown dtype is a one-line error.
TEST(CliRun, KvDtypeF16) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string());
  auto bench = test::run_ember("bench " + m + " --kv-dtype f16 -p 8 -n 4 -r 1 -t 1 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"kv_dtype\": \"f16\""), std::string::npos) << bench.out;
  const std::string run = "run " + m + " -p 'Once upon a time' --temp 0 -n 12";
  auto f32 = test::run_ember(run);
  auto f16 = test::run_ember(run + " --kv-dtype f16");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  EXPECT_EQ(f16.out, f32.out);
  auto bad = test::run_ember(run + " --kv-dtype q4_0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown --kv-dtype 'q4_0'"), std::string::npos) << bad.err;
}

TEST(CliRun, GreedyIsTheSameForEveryThreadCount) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  std::string base =
      "run -m " + test::shell_quote(model.string()) + " -p 'Once upon a time' --temp 0 -n 60";
  auto one = test::run_ember(base + " -t 1");
  auto two = test::run_ember(base + " -t 2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.out.rfind("Once upon a time", 0), 0u) << "stdout starts with the prompt";
}

TEST(CliRun, SameSeedSameTextDifferentSeedDifferentText) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  std::string base = "run -m " + test::shell_quote(model.string()) +
                     " -p 'Lily' --temp 1.0 --top-k 0 --top-p 1 --min-p 0 -n 80";
  auto a = test::run_ember(base + " --seed 7");
  auto b = test::run_ember(base + " --seed 7");
  auto c = test::run_ember(base + " --seed 8");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(CliRun, HelpListsTheSamplingFlags) {
  auto r = test::run_ember("run --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed",
                           "--dtype", "--dummy"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A GPT-2 GGUF as llama.cpp's converter writes it runs end to end from the CLI: its byte-level BPE
// with the gpt-2 pre-tokenizer gives GPT-2's ids, and generation runs on the gpt2 forward pass.
TEST(CliRun, Gpt2GgufTokenizesAndGenerates) {
  const auto model = test::fixture("models/family-zoo/gpt2.gguf");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no family-zoo fixture";
  const std::string m = test::shell_quote(model.string());
  auto r = test::run_ember("tokenize -m " + m + " -p \"Hello world, it's GPT-2\" --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995 11 340 338 402 11571 12 17\n");
  r = test::run_ember("run -m " + m + " -p \"Hello world\" -n 6 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Hello world", 0), 0u) << r.out;
}

}  // namespace
}  // namespace ember
