// `ember run` end to end on the real stories260K model, from both of its formats.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember {
namespace {

using test::read_text;

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

// bench --block-size sets the KV pool's tokens per block, as serve's does; a negative one is
// refused. Without it a per-channel q4_0 K cache gets 64-token blocks, every other cache 16
// (default_kv_block_size).
TEST(CliRun, BenchTakesTheKvBlockSize) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string());
  auto bench = test::run_ember("bench " + m +
                               " -p 0 -n 4 -r 1 -t 1 --decode-context 40 --block-size 7 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["block_size"], 7);
  EXPECT_GT(j["tg"]["tok_per_s"].get<double>(), 0.0);
  auto bad = test::run_ember("bench " + m + " -p 0 -n 4 -r 1 --block-size -1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--block-size must be >= 1"), std::string::npos) << bad.err;
  for (const auto& [kv, expected] :
       {std::pair<std::string, int>{"f16", 16}, {"q8_0", 16}, {"q4_0", 64}}) {
    auto plain = test::run_ember("bench " + m + " -p 0 -n 2 -r 1 -t 1 --decode-context 8 " +
                                 "--kv-dtype " + kv + " --json");
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(nlohmann::json::parse(plain.out)["block_size"], expected) << kv;
  }
  auto token_groups = test::run_ember("bench " + m + " -p 0 -n 2 -r 1 -t 1 --decode-context 8 " +
                                      "--kv-dtype q4_0 --kv-k-scales token --json");
  ASSERT_EQ(token_groups.exit_code, 0) << token_groups.err;
  EXPECT_EQ(nlohmann::json::parse(token_groups.out)["block_size"], 16);
}

// bench --probe with a prompt measures each kernel family's compute peak and times prefill's
// matmuls and attention: attention's FLOPs are exactly 4 head_dim n_heads n_layers per (query,
// key) pair of the causal prompts (stories260K: head_dim 8, 8 heads, 5 layers).
TEST(CliRun, BenchProbeReportsComputePeaksAndPrefillOpGroups) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  auto bench = test::run_ember("bench -m " + test::shell_quote(model.string()) +
                               " -p 64 -n 0 -r 2 -t 2 --probe --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  auto j = nlohmann::json::parse(bench.out);
  const auto& c = j["compute"];
  ASSERT_TRUE(c["peaks"].is_object()) << bench.out;
  ASSERT_FALSE(c["peaks"].empty());  // every x86-64 machine we run on has AVX2 at least
  // A rate in operations per second, not a speed check (that is the benchmarks' business): under
  // ASan on a busy 2-core VM one family measured 0.89e9, where a release build measures 1e10+.
  for (const auto& [family, peak] : c["peaks"].items()) {
    EXPECT_GT(peak["ops_per_second"].get<double>(), 1e7) << family;
  }
  const auto& p = c["prefill"];
  EXPECT_EQ(p["tokens"], 128);
  EXPECT_EQ(p["attention_flops"].get<double>(), 2 * 4.0 * 8 * 8 * 5 * (64 * 65 / 2));
  // Every layer's 7 matrices for each token, at least (plus the logits' rows).
  EXPECT_GE(p["matmul_flops"].get<double>(),
            128 * 2.0 * 5 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172));
  const double total = p["seconds"].get<double>(), mm = p["matmul_seconds"].get<double>(),
               att = p["attention_seconds"].get<double>();
  EXPECT_GT(mm, 0);
  EXPECT_GT(att, 0);
  EXPECT_LT(mm + att, total);
  EXPECT_TRUE(c["peaks"].contains(p["family"].get<std::string>())) << p["family"];
  // The text form names the families and the prefill's share of its peak.
  auto text = test::run_ember("bench -m " + test::shell_quote(model.string()) +
                              " -p 32 -n 0 -r 1 -t 1 --probe");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("compute probe"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("prefill (32 tokens):"), std::string::npos) << text.out;
}

// --kv-dtype reaches the KV pool (bench reports it); f16, bf16 and q8_0 caches generate the same
// greedy story start as the exact f32 cache on stories260K; K and V can be set apart; an unknown
// dtype is a one-line error naming the flag.
TEST(CliRun, KvDtypes) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "-m " + test::shell_quote(model.string());
  auto bench = test::run_ember("bench " + m + " --kv-dtype f16 -p 8 -n 4 -r 1 -t 1 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"kv_dtype\": \"f16\""), std::string::npos) << bench.out;
  auto mixed = test::run_ember("bench " + m +
                               " --kv-dtype-k q8_0 --kv-dtype-v q4_0 -p 8 -n 4 -r 1 -t 1 --json");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_NE(mixed.out.find("\"kv_dtype\": \"q8_0/q4_0\""), std::string::npos) << mixed.out;
  const std::string run = "run " + m + " -p 'Once upon a time' --temp 0 -n 12";
  auto f32 = test::run_ember(run);
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  for (const char* dtype : {"f16", "bf16", "q8_0"}) {
    auto narrow = test::run_ember(run + " --kv-dtype " + dtype);
    ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
    EXPECT_EQ(narrow.out, f32.out) << dtype;
  }
  auto bad = test::run_ember(run + " --kv-dtype q4_k");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown --kv-dtype 'q4_k'"), std::string::npos) << bad.err;
  auto bad_v = test::run_ember(run + " --kv-dtype-v iq4_xs");
  EXPECT_EQ(bad_v.exit_code, 1);
  EXPECT_NE(bad_v.err.find("unknown --kv-dtype-v 'iq4_xs'"), std::string::npos) << bad_v.err;
}

// `score --kv-baseline f16`: the quality of a quantized cache on the stories260K fixture text (the
// model's own greedy story). Targets (issue: KV-cache memory): q8_0 mean KL <= 0.002 and perplexity
// within 0.5% of the f16 cache; measured here 0.00081 and +0.37%. A baseline of the same dtype
// is the same run: KL 0.
TEST(CliRun, ScoreKvBaselineMeasuresQuantizedCache) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  auto text = test::fixture("models/stories260K/expected-greedy-200.txt");
  EMBER_REQUIRE_FIXTURE(model);
  EMBER_REQUIRE_FIXTURE(text);
  const std::string base = "score -q -m " + test::shell_quote(model.string()) + " -f " +
                           test::shell_quote(text.string()) + " --kv-baseline f16";
  const auto measure = [&](const std::string& flags) {
    auto r = test::run_ember(base + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    double kl = -1, max_kl = -1, agree = -1, ppl = -1, ppl_base = -1, change = 0;
    const size_t at = r.out.find("mean KL");
    EXPECT_NE(at, std::string::npos) << r.out;
    if (at != std::string::npos) {
      std::sscanf(r.out.c_str() + at,
                  "mean KL %lf, max KL %lf over %*d positions, top-1 agreement %lf, perplexity "
                  "%lf vs %lf (%lf%%)",
                  &kl, &max_kl, &agree, &ppl, &ppl_base, &change);
    }
    return std::array<double, 3>{kl, agree, change};
  };
  const auto same = measure("--kv-dtype f16");
  EXPECT_EQ(same[0], 0.0);
  EXPECT_EQ(same[1], 1.0);
  const auto q8 = measure("--kv-dtype q8_0");
  EXPECT_GT(q8[0], 0.0);  // the cache really is quantized
  EXPECT_LE(q8[0], 0.002);
  EXPECT_LE(std::fabs(q8[2]), 0.5);
  const auto q8_rotated = measure("--kv-dtype q8_0 --kv-rotate");
  EXPECT_GT(q8_rotated[0], 0.0);
  EXPECT_LE(q8_rotated[0], 0.002);
  // q4_0: K per channel by default (targets KL <= 0.02, perplexity within 3%; measured 0.0024 and
  // -0.03%); q4_0's per-token groups for K measured 0.42 and +73% (stories260K's 8-value heads).
  const auto q4 = measure("--kv-dtype q4_0");
  EXPECT_GT(q4[0], 0.0);
  EXPECT_LE(q4[0], 0.02);
  EXPECT_LE(std::fabs(q4[2]), 3.0);
  const auto q4_token = measure("--kv-dtype q4_0 --kv-k-scales token");
  EXPECT_GT(q4_token[0], 10 * q4[0]);
  auto bad = test::run_ember("score -q -m " + test::shell_quote(model.string()) +
                             " -p 'Once upon a time' --kv-baseline q5_k");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--kv-baseline"), std::string::npos) << bad.err;
  auto bad_scales = test::run_ember("score -q -m " + test::shell_quote(model.string()) +
                                    " -p 'Once upon a time' --kv-dtype q8_0 --kv-k-scales channel");
  EXPECT_EQ(bad_scales.exit_code, 1);
  EXPECT_NE(bad_scales.err.find("--kv-k-scales channel needs a q4_0 K cache"), std::string::npos)
      << bad_scales.err;
}

// bench --prefix-from ram|disk: the second request's prefix comes back from that offload tier
// (100 tokens: 6 full blocks of 16 before the one holding the last token).
TEST(CliRun, BenchRestoresAPrefixFromEachOffloadTier) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string dir = (test::scratch_dir("bench-offload") / "tier").string();
  const std::string base = "bench -m " + test::shell_quote(model.string()) +
                           " -p 0 -n 0 -r 1 --json --prefix-tokens 100 ";
  for (const std::string& tier : {std::string("ram"), std::string("disk")}) {
    auto r =
        test::run_ember(base + "--prefix-from " + tier +
                        (tier == "ram" ? " --kv-offload-ram 16MiB" : " --kv-offload-dir " + dir));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prefix_cache"]["cached_tokens"], 96) << tier;
    EXPECT_EQ(j["prefix_cache"]["restored_blocks"], 6) << tier;
    EXPECT_GT(j["prefix_cache"]["tier_read_bytes"].get<double>(), 0) << tier;
  }
  auto bad = test::run_ember(base + "--prefix-from ram");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--kv-offload-ram"), std::string::npos) << bad.err;
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

// --draft / --draft-dtype / --draft-layers: every draft gives the plain run's greedy text, the
// stats name the draft, bench --json reports the proposer and its cost ratio; a draft with another
// vocabulary, a draft where nothing decodes (score) and too many layers are one-line errors.
TEST(CliRun, DraftModelsKeepTheGreedyTextAndBadDraftsAreRefused) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  auto other = test::fixture("models/family-zoo/gpt2.gguf");  // GPT-2 BPE
  EMBER_REQUIRE_FIXTURE(model);
  EMBER_REQUIRE_FIXTURE(other);
  const std::string m = "-m " + test::shell_quote(model.string());
  const std::string run = "run " + m + " -p 'Once upon a time' --temp 0 -n 60";
  auto plain = test::run_ember(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::vector<std::pair<std::string, std::string>> drafts = {
      {"--draft-layers 3", "the model, first 3 layers"},
      {"--draft-dtype q4_0", "q4_0 copy of the model"},
      {"--draft " + test::shell_quote(model.string()) + " --draft-dtype q8_0",
       "stories260K.gguf as q8_0"}};
  for (const auto& [flags, name] : drafts) {
    auto r = test::run_ember(run + " " + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << flags;
    EXPECT_NE(r.err.find("speculative (" + name + ")"), std::string::npos) << r.err;
  }
  auto bench = test::run_ember("bench " + m + " --draft-dtype q8_0 -p 0 -n 16 -r 1 -t 1 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"proposer\": \"draft\""), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"cost_ratio\""), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"theoretical_speedup_per_step\""), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"steps_by_guesses\""), std::string::npos) << bench.out;

  auto vocab = test::run_ember(run + " --draft " + test::shell_quote(other.string()));
  EXPECT_EQ(vocab.exit_code, 1);
  EXPECT_NE(vocab.err.find("share the vocabulary"), std::string::npos) << vocab.err;
  auto layers = test::run_ember(run + " --draft-layers 9");
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_NE(layers.err.find("--draft-layers 9 must be below the model's 5 layers"),
            std::string::npos)
      << layers.err;
  auto dtype = test::run_ember(run + " --draft-dtype q9_9");
  EXPECT_EQ(dtype.exit_code, 1);
  EXPECT_NE(dtype.err.find("unknown --draft-dtype 'q9_9'"), std::string::npos) << dtype.err;
  auto score = test::run_ember("score -q " + m + " -p 'Once upon a time' --draft-layers 2");
  EXPECT_EQ(score.exit_code, 1);
  EXPECT_NE(score.err.find("speculative decoding does not apply"), std::string::npos) << score.err;
}

// A mixture of experts in bench: the bandwidth figures use the bytes one token reads (k of E
// experts), --json has every layer's expert load (each routed token counted k times per layer).
TEST(CliRun, BenchOfAMixtureReportsActiveBytesAndExpertLoad) {
  auto olmoe = test::fixture("models/moe-zoo/olmoe.gguf");
  EMBER_REQUIRE_FIXTURE(olmoe);
  auto r = test::run_ember("bench -m " + test::shell_quote(olmoe.string()) +
                           " -p 32 -n 8 -r 1 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["matrix_bytes_active"].get<int64_t>(), j["matrix_bytes"].get<int64_t>());
  EXPECT_EQ(j["experts"]["count"], 16);
  EXPECT_EQ(j["experts"]["used_per_token"], 4);
  const auto& load = j["experts"]["load"];
  ASSERT_EQ(load.size(), 2u);  // layers
  int64_t first = -1;
  for (const auto& layer : load) {
    ASSERT_EQ(layer.size(), 16u);
    int64_t sum = 0;
    for (const auto& n : layer) sum += n.get<int64_t>();
    EXPECT_GT(sum, 32 * 4);
    EXPECT_EQ(sum % 4, 0);
    if (first < 0) first = sum;
    EXPECT_EQ(sum, first);  // every layer routes every token
  }
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

namespace ember {
namespace {

// --grammar / --json-schema: whatever the sampler draws, the generated text matches; a bad grammar
// is one error naming the file and line.
TEST(CliRunConstrained, GrammarAndJsonSchemaShapeTheOutput) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("run-grammar");
  std::ofstream(dir / "g.gbnf") << "root ::= \" \" (\"yes\" | \"no\") \"!\"\n";
  std::ofstream(dir / "s.json") << R"({"enum": ["red", "green", [1, 2]]})";
  std::ofstream(dir / "bad.gbnf") << "root ::= \"a\"\nb ::= \"x\" @\n";
  const std::string m =
      "run -m " + test::shell_quote(model.string()) + " -p 'Lily said' --temp 1 -n 30";
  for (int seed = 1; seed <= 3; ++seed) {
    auto r = test::run_ember(m + " --seed " + std::to_string(seed) + " --grammar " +
                             test::shell_quote((dir / "g.gbnf").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(r.out == "Lily said yes!\n" || r.out == "Lily said no!\n") << r.out;
    auto j = test::run_ember(m + " --seed " + std::to_string(seed) + " --json-schema " +
                             test::shell_quote((dir / "s.json").string()));
    ASSERT_EQ(j.exit_code, 0) << j.err;
    const std::string text = j.out.substr(std::string("Lily said").size());
    const auto v = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(v == "red" || v == "green" || v == nlohmann::json({1, 2})) << j.out;
  }
  auto bad = test::run_ember(m + " --grammar " + test::shell_quote((dir / "bad.gbnf").string()));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ember
