// Speculative decoding by prompt lookup (engine/speculative.h): the proposer's matches, and the
// engine's exactness — greedy and seeded sampling give the same tokens with and without guesses on
// stories260K and the SmolLM2-shaped dummy, alone and batched with other sequences — with every KV
// block back afterwards, the rejected guesses' K/V cut off, and the settings checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/engine/speculative.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

TEST(PromptLookup, ProposesTheContinuationOfTheLatestLongestMatch) {
  const std::vector<int32_t> t = {5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 5, 6, 7};
  // "5 6 7" occurs at 0 and 5 before the tail: the latest (5) continues with 1 2 5 6 7, and then
  // periodically (the text repeats every 5 tokens from there): 1 2 5 6 7 1 2 ...
  EXPECT_EQ(propose_lookup(t, 3, 3), (std::vector<int32_t>{1, 2, 5}));
  EXPECT_EQ(propose_lookup(t, 3, 7), (std::vector<int32_t>{1, 2, 5, 6, 7, 1, 2}));
  // A 1-gram is tried when no longer one matches: the tail 4 never occurred, 9 -> 5.
  EXPECT_TRUE(propose_lookup(std::vector<int32_t>{1, 2, 3, 4}, 3, 5).empty());
  EXPECT_EQ(propose_lookup(std::vector<int32_t>{9, 5, 4, 9}, 2, 2), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(propose_lookup(std::vector<int32_t>{9, 5, 4, 9}, 2, 4),
            (std::vector<int32_t>{5, 4, 9, 5}));
  EXPECT_TRUE(propose_lookup(std::vector<int32_t>{1}, 3, 5).empty());
  EXPECT_TRUE(propose_lookup(t, 3, 0).empty());
  // A repeated token proposes itself k times (period 1).
  EXPECT_EQ(propose_lookup(std::vector<int32_t>{4, 4, 4}, 2, 3), (std::vector<int32_t>{4, 4, 4}));
}

struct Generated {
  std::vector<int32_t> tokens;
  std::string finish;
};

class SpeculativeEngine : public ::testing::Test {
 protected:
  static LoadedModel load(const std::string& path, bool dummy) {
    LoadOptions o;
    o.path = path;
    o.dummy = dummy;
    o.load_tokenizer = true;
    return load_model(o);
  }

  // Runs every request together in one engine; the generated tokens of each.
  static std::vector<Generated> generate(const LoadedModel& m, std::vector<GenerationRequest> reqs,
                                         const SpeculativeOptions& spec,
                                         SpeculativeStats* stats = nullptr) {
    LLMEngineOptions eo;
    eo.engine.max_context = 512;
    eo.engine.max_sequences = static_cast<int64_t>(reqs.size());
    eo.engine.prefix_caching = true;
    eo.scheduler.max_sequences = static_cast<int64_t>(reqs.size());
    eo.scheduler.max_batched_tokens = 256;
    eo.speculative = spec;
    LLMEngine engine(m.weights, m.tokenizer.get(), eo);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (GenerationRequest& r : reqs) streams.push_back(engine.add_request(std::move(r)));
    while (engine.step()) {
    }
    std::vector<Generated> out(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      while (auto e = streams[i]->pop(std::chrono::milliseconds(0))) {
        out[i].tokens.insert(out[i].tokens.end(), e->tokens.begin(), e->tokens.end());
        if (e->finished) out[i].finish = finish_reason_name(e->finish_reason);
      }
    }
    EXPECT_EQ(engine.kv().used_blocks(), 0);  // every block back, guesses' included
    if (stats != nullptr) *stats = engine.speculative_stats();
    return out;
  }

  static GenerationRequest request(const LoadedModel& m, const std::string& text, int64_t n,
                                   float temperature, uint64_t seed) {
    GenerationRequest r;
    r.prompt = m.tokenizer->encode(text, true);
    r.max_tokens = n;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    return r;
  }

  // The same requests without and with prompt lookup: identical tokens and finish reasons.
  static void expect_exact(const LoadedModel& m, const std::vector<GenerationRequest>& reqs,
                           int32_t ngram, int32_t k, bool expect_accepted) {
    const std::vector<Generated> plain = generate(m, reqs, {});
    SpeculativeStats stats;
    const std::vector<Generated> spec = generate(m, reqs, {ngram, k}, &stats);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
      EXPECT_EQ(spec[i].finish, plain[i].finish) << "request " << i;
    }
    EXPECT_GT(stats.drafted, 0);
    if (expect_accepted) {
      EXPECT_GT(stats.accepted, 0);
    }
  }
};

TEST_F(SpeculativeEngine, GreedyAndSeededSamplingAreExactOnStories260K) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park",
                                            "The cat sat on the mat. The cat sat on the", ""};
  for (float temperature : {0.0f, 0.9f}) {
    for (int32_t k : {1, 4}) {
      SCOPED_TRACE("temperature " + std::to_string(temperature) + " k " + std::to_string(k));
      std::vector<GenerationRequest> alone = {request(m, prompts[0], 120, temperature, 11)};
      expect_exact(m, alone, 3, k, temperature == 0.0f);
      std::vector<GenerationRequest> batched;
      for (size_t i = 0; i < prompts.size(); ++i) {
        batched.push_back(
            request(m, prompts[i], 60 + 20 * static_cast<int64_t>(i), temperature, 100 + i));
      }
      batched[1].speculative = false;  // a request that opts out shares the steps
      batched[2].sampling.repeat_penalty = 1.3f;
      batched[3].min_tokens = 30;
      expect_exact(m, batched, 2, k, temperature == 0.0f);
    }
  }
}

TEST_F(SpeculativeEngine, GreedyIsExactOnTheSmolLM2ShapedDummy) {
  auto config = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(config);
  const LoadedModel m = load(config.string(), true);
  std::vector<GenerationRequest> reqs = {
      request(m, "The quick brown fox jumps over the lazy dog. The quick brown fox", 24, 0, 1),
      request(m, "1 2 3 4 5 6 7 8 9 10 1 2 3", 16, 0, 2)};
  expect_exact(m, reqs, 3, 5, true);
}

TEST_F(SpeculativeEngine, SettingsAreChecked) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  LLMEngineOptions eo;
  eo.speculative = {3, 65};
  EXPECT_THROW(LLMEngine(m.weights, m.tokenizer.get(), eo), Error);
  eo.speculative = {-1, 5};
  EXPECT_THROW(LLMEngine(m.weights, m.tokenizer.get(), eo), Error);
}

}  // namespace
}  // namespace ember
