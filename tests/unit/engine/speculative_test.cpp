// Speculative decoding by prompt lookup (engine/speculative.h) and by a draft model
// (engine/draft_proposer.h): the lookup proposer's matches, and the engine's exactness — greedy and
// seeded sampling give the same tokens with and without guesses on stories260K and the
// SmolLM2-shaped dummy, alone and batched with other sequences, for prompt lookup, an early-exit
// draft, lower-bit copies of the model and another file — with every KV block (the draft's K/V
// share them) back afterwards, the rejected guesses' K/V cut off, and the settings checked.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/error.h"
#include "ember/engine/draft_proposer.h"
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
  void TearDown() override { kv_dtype = DType::F32; }
  static inline DType kv_dtype = DType::F32;  // the KV cache generate() runs with

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
                                         SpeculativeStats* stats = nullptr, int64_t kv_blocks = 0) {
    LLMEngineOptions eo;
    eo.engine.max_context = 512;
    eo.engine.max_sequences = static_cast<int64_t>(reqs.size());
    eo.engine.kv_blocks = kv_blocks;
    eo.engine.prefix_caching = true;
    eo.engine.kv_dtype = kv_dtype;
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
        EXPECT_TRUE(e->error.empty()) << "request " << i << ": " << e->error;
      }
    }
    EXPECT_EQ(engine.kv().used_blocks(), 0);  // every block back, guesses' and draft's included
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
    expect_exact(m, reqs, SpeculativeOptions{ngram, k}, expect_accepted);
  }

  // ... and with any proposer (kv_blocks: the target's and the draft's pool, 0: enough).
  static SpeculativeStats expect_exact(const LoadedModel& m,
                                       const std::vector<GenerationRequest>& reqs,
                                       const SpeculativeOptions& options, bool expect_accepted,
                                       int64_t kv_blocks = 0) {
    const std::vector<Generated> plain = generate(m, reqs, {}, nullptr, kv_blocks);
    SpeculativeStats stats;
    const std::vector<Generated> spec = generate(m, reqs, options, &stats, kv_blocks);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
      EXPECT_EQ(spec[i].finish, plain[i].finish) << "request " << i;
    }
    EXPECT_GT(stats.drafted, 0);
    if (expect_accepted) {
      EXPECT_GT(stats.accepted, 0);
    }
    return stats;
  }

  static SpeculativeOptions draft_options(const ModelWeights* draft, int64_t layers, int32_t k) {
    SpeculativeOptions o;
    o.draft = draft;
    o.draft_layers = layers;
    o.draft_max = k;
    return o;
  }

  static LoadedModel load_as(const std::string& path, DType dtype) {
    LoadOptions o;
    o.path = path;
    o.dtype = dtype;
    o.load_tokenizer = true;
    return load_model(o);
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

// The formula (1 - a^(k+1)) / ((1 - a)(kc + 1)) step by step: the formula itself when every step
// has the same k, and a step without guesses one token for one plain step's cost.
TEST(SpeculativeStatsTheory, PerStepFormulaIsTheIssuesFormulaAtAConstantK) {
  SpeculativeStats s;
  for (int i = 0; i < 10; ++i) s.count_step(4);
  s.drafted = 40;
  s.accepted = 20;  // a = 0.5
  const double at4 = (1 - std::pow(0.5, 5)) / 0.5;
  EXPECT_NEAR(s.theoretical_speedup_per_step(0.0), at4, 1e-12);
  EXPECT_NEAR(s.theoretical_speedup_per_step(0.1), at4 / 1.4, 1e-12);
  for (int i = 0; i < 10; ++i) s.count_step(0);
  EXPECT_EQ(s.steps_without_guesses(), 10);
  EXPECT_NEAR(s.theoretical_speedup_per_step(0.1), (10 * at4 + 10) / (10 * 1.4 + 10), 1e-12);
  EXPECT_EQ(SpeculativeStats{}.theoretical_speedup_per_step(0.0), 0.0);
}

// Every decode step of a speculating sequence is counted once, by the guesses it carried: one
// token from each step without guesses, the kept guesses plus one from each verifying step, and
// the first token from the prompt's step make up the output.
TEST_F(SpeculativeEngine, StatsCountEveryDecodeStepByItsGuesses) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  SpeculativeStats stats;
  const std::vector<Generated> out =
      generate(m, {request(m, "The cat sat on the mat. The cat sat on the", 150, 0.0f, 1)},
               SpeculativeOptions{3, 4}, &stats);
  ASSERT_EQ(out[0].tokens.size(), 150u);
  int64_t verifying = 0, guesses = 0;
  for (size_t k = 1; k < stats.steps_by_guesses.size(); ++k) {
    verifying += stats.steps_by_guesses[k];
    guesses += static_cast<int64_t>(k) * stats.steps_by_guesses[k];
  }
  EXPECT_EQ(verifying, stats.verify_steps);
  EXPECT_EQ(guesses, stats.drafted);
  EXPECT_GT(stats.verify_steps, 0);
  EXPECT_GT(stats.steps_without_guesses(), 0);  // its stories do not repeat all along
  EXPECT_EQ(stats.steps_without_guesses() + stats.verify_steps + stats.accepted + 1, 150);
  EXPECT_LE(stats.steps_by_guesses.size(), 5u);  // k <= --draft-max 4
}

// A q4_0 cache stores K per channel: a block is quantized when its sequence moves past it and
// read exact until then. Verification writes guesses into the next block and rejection sends the
// sequence back: the block it returns to must still read exact (its exact rows are kept for the
// last two steps) and be sealed again from the accepted tokens, or the tokens would drift from
// plain decoding's.
TEST_F(SpeculativeEngine, GreedyIsExactWithAPerChannelQ4KCache) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  kv_dtype = DType::Q4_0;
  std::vector<GenerationRequest> reqs = {
      request(m, "The cat sat on the mat. The cat sat on the", 150, 0, 1),
      request(m, "Once upon a time", 120, 0, 2), request(m, "Lily and Ben went", 90, 0, 3)};
  const SpeculativeStats stats = expect_exact(m, reqs, SpeculativeOptions{2, 6}, true);
  EXPECT_GT(stats.drafted, stats.accepted);  // some guesses were rejected
}

// Prompt lookup and an early-exit draft on the SmolLM2-shaped dummy.
TEST_F(SpeculativeEngine, GreedyIsExactOnTheSmolLM2ShapedDummy) {
  auto config = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(config);
  const LoadedModel m = load(config.string(), true);
  std::vector<GenerationRequest> reqs = {
      request(m, "The quick brown fox jumps over the lazy dog. The quick brown fox", 24, 0, 1),
      request(m, "1 2 3 4 5 6 7 8 9 10 1 2 3", 16, 0, 2)};
  expect_exact(m, reqs, 3, 5, true);
  // An early-exit draft (20 of its 30 layers) on the same model.
  reqs[0].max_tokens = 12;
  reqs[1].max_tokens = 8;
  expect_exact(m, reqs, draft_options(nullptr, 20, 4), false);
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

// Greedy requests take the draft's argmax: the tokens are the plain ones, alone and batched.
TEST_F(SpeculativeEngine, DraftModelsAreExactWhenGreedyOnStories260K) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const LoadedModel q8 = load_as(path.string(), DType::Q8_0);  // --draft-dtype q8_0
  const LoadedModel q4 = load_as(path.string(), DType::Q4_0);
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park",
                                            "The cat sat on the mat.", ""};
  struct Draft {
    const char* name;
    SpeculativeOptions options;
  };
  const std::vector<Draft> drafts = {
      {"early exit, 3 of 5 layers", draft_options(nullptr, 3, 4)},
      {"q8_0 copy", draft_options(&q8.weights, 0, 5)},
      {"q4_0 copy, first 4 layers", draft_options(&q4.weights, 4, 3)}};
  for (const Draft& d : drafts) {
    SCOPED_TRACE(d.name);
    const SpeculativeStats alone =
        expect_exact(m, {request(m, prompts[0], 100, 0.0f, 7)}, d.options, true);
    std::vector<GenerationRequest> batched;
    for (size_t i = 0; i < prompts.size(); ++i) {
      batched.push_back(request(m, prompts[i], 50 + 20 * static_cast<int64_t>(i), 0.0f, 200 + i));
    }
    batched[1].speculative = false;
    batched[2].sampling.repeat_penalty = 1.3f;
    batched[3].min_tokens = 30;
    expect_exact(m, batched, d.options, true);
    if (d.options.draft == &q8.weights) {
      // A q8_0 copy of this model agrees with it almost always.
      EXPECT_GT(alone.acceptance_rate(), 0.8);
      EXPECT_GT(alone.mean_accepted_length(), 3.0);
    }
  }
}

// 32 greedy sequences in a pool too small for all of them: the target preempts, and the draft's
// guesses find no blocks left at times (the draft's K/V live in the same blocks); the tokens stay
// the plain ones.
TEST_F(SpeculativeEngine, DraftUnderLoadWithAFullPoolIsExact) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const std::vector<std::string> starts = {"Once upon a time", "Lily and Ben", "The dog",
                                           "One day, a little"};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < 32; ++i) {
    reqs.push_back(
        request(m, starts[i % starts.size()], 30 + 5 * static_cast<int64_t>(i % 5), 0.0f, i));
  }
  reqs[5].sampling.repeat_penalty = 1.2f;
  expect_exact(m, reqs, draft_options(nullptr, 3, 4), true, /*kv_blocks=*/40);
}

// Requests sharing a cached prompt share the draft's K/V of it too: the draft reads the prompt's
// blocks once (of two proposals in one call, one fills a shared block, the other waits a draft step
// and takes it), a later request finds them in the prefix cache with the draft's K/V complete, and
// the tokens stay the plain ones.
TEST_F(SpeculativeEngine, DraftKvOfACachedPromptIsShared) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, Lily saw a big red ball under a tree. She ran to the "
      "ball and kicked it very high. The ball flew over the fence and landed in the garden of";
  const auto run = [&](bool speculate, int64_t* adopted, int64_t* computed) {
    LLMEngineOptions eo;
    eo.engine.max_context = 512;
    eo.engine.max_sequences = 4;
    eo.engine.prefix_caching = true;
    eo.scheduler.max_sequences = 4;
    eo.scheduler.max_batched_tokens = 512;
    if (speculate) eo.speculative = draft_options(nullptr, 3, 4);
    LLMEngine engine(m.weights, m.tokenizer.get(), eo);
    std::vector<std::shared_ptr<RequestStream>> streams;
    const auto add = [&](uint64_t seed, bool speculative) {
      GenerationRequest r = request(m, story, 24, 0.0f, seed);
      r.speculative = speculative;
      streams.push_back(engine.add_request(std::move(r)));
    };
    // The first request does not speculate: its prompt's blocks get no draft K/V from it.
    add(0, false);
    engine.step();
    // Two more share its cached blocks and propose in the same call: one fills them, the other
    // takes them.
    add(1, true);
    add(2, true);
    while (engine.step()) {
    }
    const int64_t adopted_together = engine.draft() ? engine.draft()->tokens_adopted() : 0;
    add(3, true);  // later: the draft's K/V come from the prefix cache with the blocks
    while (engine.step()) {
    }
    EXPECT_EQ(engine.kv().used_blocks(), 0);
    if (engine.draft() != nullptr) {
      *adopted = engine.draft()->tokens_adopted();
      *computed = engine.draft()->tokens_computed();
      EXPECT_GT(adopted_together, 0);
      EXPECT_GT(*adopted, adopted_together);
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& stream : streams) {
      out.emplace_back();
      while (auto e = stream->pop(std::chrono::milliseconds(0))) {
        out.back().insert(out.back().end(), e->tokens.begin(), e->tokens.end());
      }
    }
    return out;
  };
  int64_t adopted = 0, computed = 0;
  const auto plain = run(false, nullptr, nullptr);
  const auto spec = run(true, &adopted, &computed);
  EXPECT_EQ(spec, plain);
  const auto prompt = static_cast<int64_t>(m.tokenizer->encode(story, true).size());
  const int64_t bs = EngineOptions{}.block_size;
  const int64_t shared = (prompt - 1) / bs * bs;  // the prompt's full blocks before its last token
  ASSERT_GE(shared, 2 * bs);
  // Of the three speculating requests, two took the prompt's full blocks from the first's draft.
  EXPECT_EQ(adopted, 2 * shared);
  EXPECT_LT(computed, 3 * prompt);
}

// A session resumed by a prompt that leaves the kept tokens inside a block: the block's later
// positions get other tokens, so the draft K/V the first turn completed there are not taken over
// (only the blocks before the cut are), and the tokens stay the plain ones.
TEST_F(SpeculativeEngine, DraftKvIsNotTakenFromABlockASessionRewrote) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const std::vector<int32_t> first = m.tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, Lily saw a big red ball under a tree.",
      true);
  const int64_t bs = EngineOptions{}.block_size;
  ASSERT_GE(static_cast<int64_t>(first.size()), 3 * bs + 4);
  const int64_t cut = 2 * bs + bs / 2;  // inside the third block
  std::vector<int32_t> second(first.begin(), first.begin() + cut);
  for (int64_t i = 0; i < bs + 4; ++i) second.push_back(100 + static_cast<int32_t>(i));
  const auto run = [&](bool speculate, int64_t* adopted_by_second) {
    LLMEngineOptions eo;
    eo.engine.max_context = 512;
    eo.engine.prefix_caching = true;
    if (speculate) eo.speculative = draft_options(nullptr, 3, 4);
    LLMEngine engine(m.weights, m.tokenizer.get(), eo);
    std::vector<std::vector<int32_t>> out;
    int64_t adopted_before = 0;
    for (const std::vector<int32_t>* prompt :
         std::vector<const std::vector<int32_t>*>{&first, &second}) {
      GenerationRequest r;
      r.prompt = *prompt;
      r.max_tokens = 12;
      r.sampling.temperature = 0.0f;
      r.session = 7;
      if (engine.draft() != nullptr) adopted_before = engine.draft()->tokens_adopted();
      auto stream = engine.add_request(std::move(r));
      while (engine.step()) {
      }
      out.emplace_back();
      while (auto e = stream->pop(std::chrono::milliseconds(0))) {
        out.back().insert(out.back().end(), e->tokens.begin(), e->tokens.end());
      }
    }
    if (engine.draft() != nullptr) {
      *adopted_by_second = engine.draft()->tokens_adopted() - adopted_before;
    }
    engine.end_session(7);
    EXPECT_EQ(engine.kv().used_blocks(), 0);
    return out;
  };
  int64_t adopted = -1;
  const auto plain = run(false, &adopted);
  const auto spec = run(true, &adopted);
  EXPECT_EQ(spec, plain);
  EXPECT_EQ(adopted, 2 * bs);  // the two whole blocks before the cut, not the rewritten third
}

// A stop string met inside a step's kept guesses ends a request whose K/V stay for its session:
// the session keeps the tokens the request ended with (not the guesses past the stop), and the next
// turn resumes from them with the plain tokens.
TEST_F(SpeculativeEngine, AStopInsideKeptGuessesLeavesTheSessionWhole) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  const std::string prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the";
  const auto run = [&](bool speculate, const std::string& stop) {
    LLMEngineOptions eo;
    eo.engine.max_context = 512;
    eo.engine.prefix_caching = true;
    if (speculate) eo.speculative = SpeculativeOptions{3, 8};
    LLMEngine engine(m.weights, m.tokenizer.get(), eo);
    std::vector<std::string> texts;
    for (const std::string& text : {prompt, prompt + " mat. The"}) {
      GenerationRequest r = request(m, text, 40, 0.0f, 1);
      if (!stop.empty()) r.stop = {stop};
      r.session = 3;
      auto stream = engine.add_request(std::move(r));
      while (engine.step()) {
      }
      texts.emplace_back();
      while (auto e = stream->pop(std::chrono::milliseconds(0))) {
        EXPECT_TRUE(e->error.empty()) << e->error;
        texts.back() += e->text;
      }
    }
    engine.end_session(3);
    EXPECT_EQ(engine.kv().used_blocks(), 0);
    return texts;
  };
  const std::vector<std::string> plain = run(false, "");
  ASSERT_GT(plain[0].size(), 24u);
  // Stop strings from along the plain output: the request ends there either way.
  for (size_t at = 8; at + 3 < plain[0].size(); at += 7) {
    const std::string stop = plain[0].substr(at, 3);
    SCOPED_TRACE("stop \"" + stop + "\"");
    EXPECT_EQ(run(true, stop), run(false, stop));
  }
}

// Chi-square statistic of two samples' counts over the same bins (bins with fewer than 10
// observations in both together are pooled), and its degrees of freedom.
std::pair<double, int> two_sample_chi_square(const std::map<int32_t, int>& a,
                                             const std::map<int32_t, int>& b) {
  double na = 0, nb = 0;
  for (const auto& [t, c] : a) na += c;
  for (const auto& [t, c] : b) nb += c;
  std::map<int32_t, std::pair<double, double>> bins;
  for (const auto& [t, c] : a) bins[t].first += c;
  for (const auto& [t, c] : b) bins[t].second += c;
  std::vector<std::pair<double, double>> kept;
  std::pair<double, double> pooled{0, 0};
  for (const auto& [t, ab] : bins) {
    if (ab.first + ab.second >= 10) {
      kept.push_back(ab);
    } else {
      pooled.first += ab.first;
      pooled.second += ab.second;
    }
  }
  if (pooled.first + pooled.second > 0) kept.push_back(pooled);
  double stat = 0;
  for (const auto& [x, y] : kept) {
    const double d = x * std::sqrt(nb / na) - y * std::sqrt(na / nb);
    stat += d * d / (x + y);
  }
  return {stat, static_cast<int>(kept.size()) - 1};
}

// The chi-square value with `df` degrees of freedom that p = 0.01 cuts off (Wilson-Hilferty).
double chi_square_critical_01(int df) {
  const double k = df;
  const double c = 1.0 - 2.0 / (9.0 * k) + 2.3263 * std::sqrt(2.0 / (9.0 * k));
  return k * c * c * c;
}

// The acceptance rule alone: guesses drawn from q and verified against p come out distributed as
// p (goodness of fit over 40,000 draws), for q overlapping p, q wider than p and q narrower.
TEST(SpeculativeSampling, AcceptOrResampleDrawsFromTheTargetDistribution) {
  using Dist = std::vector<std::pair<float, int32_t>>;
  const Dist p = {{0.4f, 3}, {0.3f, 1}, {0.2f, 7}, {0.1f, 2}};
  const std::vector<Dist> qs = {{{0.1f, 3}, {0.5f, 1}, {0.3f, 9}, {0.1f, 2}},
                                {{0.25f, 1}, {0.25f, 2}, {0.25f, 3}, {0.25f, 7}},
                                {{1.0f, 9}},
                                {{0.7f, 3}, {0.3f, 7}}};
  std::mt19937_64 rng(2024);
  const auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  for (size_t qi = 0; qi < qs.size(); ++qi) {
    const Dist& q = qs[qi];
    std::map<int32_t, int> counts;
    int accepted = 0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      const int32_t guess = draw_from(q, uniform());
      const SpeculativeVerdict v = accept_or_resample(p, q, guess, uniform(), uniform());
      ++counts[v.token];
      accepted += v.accepted ? 1 : 0;
    }
    double stat = 0;
    for (const auto& [prob, token] : p) {
      const double expected = prob * n;
      stat += (counts[token] - expected) * (counts[token] - expected) / expected;
    }
    EXPECT_EQ(counts.count(9) != 0 && counts[9] > 0, false)
        << "q " << qi << " leaked a token p lacks";
    EXPECT_LT(stat, chi_square_critical_01(static_cast<int>(p.size()) - 1)) << "q " << qi;
    // The acceptance rate is sum_x min(p(x), q(x)).
    double overlap = 0;
    for (const auto& [prob, token] : p) {
      for (const auto& [qp, qt] : q) {
        if (qt == token) overlap += std::min(prob, qp);
      }
    }
    EXPECT_NEAR(static_cast<double>(accepted) / n, overlap, 0.01) << "q " << qi;
  }
}

// Sampled requests with a draft that samples (an early exit of 3 of 5 layers: q differs from p):
// the second and third generated tokens of 600 seeded requests are distributed as plain decoding
// gives them (two-sample chi-square, p >= 0.01), for full-vocabulary sampling and for top-k /
// top-p / min-p with a penalty. (Accepting every guess fails it by a factor of ~10.)
TEST_F(SpeculativeEngine, SampledDraftGuessesKeepTheModelsDistribution) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  const LoadedModel m = load(path.string(), false);
  struct Setting {
    const char* name;
    SamplingParams params;
  };
  SamplingParams full;
  full.temperature = 1.0f;
  full.top_k = 0;
  full.top_p = 1.0f;
  full.min_p = 0.0f;
  SamplingParams filtered;
  filtered.temperature = 0.7f;
  filtered.top_k = 20;
  filtered.top_p = 0.9f;
  filtered.min_p = 0.02f;
  filtered.repeat_penalty = 1.2f;
  for (const Setting& setting : {Setting{"full vocabulary, T 1", full},
                                 Setting{"top-k 20, top-p 0.9, min-p, penalty, T 0.7", filtered}}) {
    SCOPED_TRACE(setting.name);
    std::vector<GenerationRequest> reqs;
    for (uint64_t i = 0; i < 600; ++i) {
      GenerationRequest r = request(m, "Lily", 3, 1.0f, 0);
      r.sampling = setting.params;
      r.sampling.seed = 1000 + i;
      reqs.push_back(std::move(r));
    }
    const std::vector<Generated> plain = generate(m, reqs, {}, nullptr);
    SpeculativeStats stats;
    const std::vector<Generated> spec = generate(m, reqs, draft_options(nullptr, 3, 4), &stats);
    EXPECT_GT(stats.drafted, 500);
    for (size_t position : {1, 2}) {
      std::map<int32_t, int> a, b;
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_EQ(plain[i].tokens.size(), 3u);
        ASSERT_EQ(spec[i].tokens.size(), 3u);
        ++a[plain[i].tokens[position]];
        ++b[spec[i].tokens[position]];
      }
      const auto [stat, df] = two_sample_chi_square(a, b);
      EXPECT_LT(stat, chi_square_critical_01(df)) << "token " << position << ", " << df << " df";
    }
  }
}

TEST_F(SpeculativeEngine, DraftSettingsAreChecked) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  auto gpt2 = test::fixture("models/family-zoo/gpt2.gguf");  // GPT-2's 50257-token vocabulary
  EMBER_REQUIRE_FIXTURE(path);
  EMBER_REQUIRE_FIXTURE(gpt2);
  const LoadedModel m = load(path.string(), false);
  const LoadedModel other = load(gpt2.string(), false);
  const auto refused = [&](const SpeculativeOptions& spec, const std::string& field) {
    LLMEngineOptions eo;
    eo.speculative = spec;
    try {
      LLMEngine engine(m.weights, m.tokenizer.get(), eo);
      ADD_FAILURE() << "accepted; expected an error naming " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused(draft_options(&other.weights, 0, 5), "vocabulary");  // 50257 tokens against 512
  refused(draft_options(nullptr, 5, 5), "--draft-layers");     // all 5 layers: no early exit
  refused(draft_options(nullptr, -1, 5), "--draft-layers");
  SpeculativeOptions both = draft_options(nullptr, 2, 5);
  both.lookup_ngram = 3;
  refused(both, "choose one proposer");
  EXPECT_THROW(check_draft_vocabulary(*m.tokenizer, *other.tokenizer), Error);
  EXPECT_NO_THROW(check_draft_vocabulary(*m.tokenizer, *m.tokenizer));
}

// A mixture of experts (the moe-zoo's files) in the engine as any model: 6 sequences batched with
// prefix caching and a preempting pool, with prompt lookup and with an early-exit draft, give
// the plain greedy tokens.
TEST_F(SpeculativeEngine, MixturesOfExpertsAreExactUnderBatchingAndSpeculation) {
  for (const char* name : {"mixtral", "qwen2moe", "olmoe"}) {
    SCOPED_TRACE(name);
    auto path = test::fixture(std::string("models/moe-zoo/") + name + ".gguf");
    EMBER_REQUIRE_FIXTURE(path);
    LoadOptions o;
    o.path = path.string();
    o.load_tokenizer = false;
    const LoadedModel m = load_model(o);
    const std::vector<int32_t> ids =
        test::read_ids_file(test::fixture(std::string("models/moe-zoo/") + name + ".ids"));
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < 6; ++i) {
      GenerationRequest r;
      // A shared prefix (prefix cache) and repeated text (lookup's matches).
      r.prompt.assign(ids.begin(), ids.begin() + 8 + static_cast<std::ptrdiff_t>(i));
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.begin() + 8);
      r.max_tokens = 24;
      r.sampling.temperature = 0;
      r.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    expect_exact(m, reqs, SpeculativeOptions{3, 4}, false, /*kv_blocks=*/12);
    expect_exact(m, reqs, draft_options(nullptr, 1, 3), false, /*kv_blocks=*/12);
  }
}

}  // namespace
}  // namespace ember
