// Sliding-window models give the KV blocks their windows have passed back to the pool during a
// long generation: memory stays bounded by the window, and the generated tokens are those of an
// engine that keeps every block (attention never reads behind the window, so nothing it reads was
// given back). Phi-3 (window 12 on every layer) releases blocks of its one pool; Gemma 2 (window 8
// on every other layer) keeps its sliding layers in a pool of their own (backend/kv_cache.h) whose
// blocks go back while the global layers' pool keeps every position. Speculative guesses that are
// rolled back and prefixes found in the cache keep the tokens too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ember/engine/llm_engine.h"
#include "ember/engine/scheduler.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

struct Generation {
  std::vector<std::vector<int32_t>> tokens;  // per request
  int64_t peak_used_blocks = 0;
  int64_t peak_window_blocks = 0;  // of the window layers' own pool, when there is one
  int64_t window_pool_blocks = 0;
  int64_t main_layers = 0;  // layers in the main pool's storage
  SpeculativeStats spec;
  // The engine's metrics (/metrics): the window pool's gauges, and a rendering while it held
  // blocks.
  bool metrics_window_pool = false;
  int64_t metrics_window_total = 0, metrics_peak_window_used = 0;
  std::string rendered;
};

struct GenerationSetup {
  bool release = true;
  int32_t lookup = 0;        // --lookup N
  int64_t max_tokens = 150;  // per request (Gemma's 26 layers: fewer, for the ASan build's time)
  float temperature = 0.0f;  // seeded sampling above 0
};

GenerationRequest make_request(int r, float temperature = 0.0f, int64_t max_tokens = 150) {
  GenerationRequest req;
  for (int i = 0; i < 20 + 7 * r; ++i) req.prompt.push_back(3 + (i * 37 + r * 11) % 500);
  req.max_tokens = max_tokens;
  req.sampling.temperature = temperature;
  req.sampling.seed = 1234 + static_cast<uint64_t>(r);
  req.ignore_eos = true;
  return req;
}

Generation generate(const ModelWeights& weights, const GenerationSetup& setup) {
  LLMEngineOptions lo;
  lo.engine.max_context = 256;
  lo.engine.max_sequences = 2;
  lo.engine.block_size = 4;
  lo.engine.release_window_blocks = setup.release;
  lo.scheduler.max_batched_tokens = 8;  // prompts in chunks: windows across chunk boundaries
  lo.speculative.lookup_ngram = setup.lookup;
  LLMEngine engine(weights, nullptr, lo);
  Generation g;
  g.main_layers = engine.runner().kv_shape().n_layers;
  g.window_pool_blocks = engine.window_kv() != nullptr ? engine.window_kv()->n_blocks() : 0;
  g.tokens.resize(2);
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto drain = [&] {
    while (engine.step()) {
      g.peak_used_blocks = std::max(g.peak_used_blocks, engine.kv().used_blocks());
      if (engine.window_kv() != nullptr) {
        g.peak_window_blocks = std::max(g.peak_window_blocks, engine.window_kv()->used_blocks());
      }
      const ServingMetrics m = engine.metrics();  // what /metrics shows
      g.metrics_window_pool = m.kv_window_pool;
      g.metrics_window_total = m.kv_window_blocks_total;
      g.metrics_peak_window_used = std::max(g.metrics_peak_window_used, m.kv_window_blocks_used);
      if (m.kv_window_blocks_used > 0) g.rendered = m.render_prometheus();
      for (size_t r = 0; r < streams.size(); ++r) {
        while (auto e = streams[r]->pop(std::chrono::milliseconds(0))) {
          g.tokens[r].insert(g.tokens[r].end(), e->tokens.begin(), e->tokens.end());
        }
      }
    }
  };
  for (int r = 0; r < 2; ++r)
    streams.push_back(engine.add_request(make_request(r, setup.temperature, setup.max_tokens)));
  drain();
  EXPECT_EQ(engine.kv().used_blocks(), 0);
  if (engine.window_kv() != nullptr) {
    EXPECT_EQ(engine.window_kv()->used_blocks(), 0);
  }
  g.spec = engine.speculative_stats();
  return g;
}

Generation generate(const ModelWeights& weights, bool release) {
  GenerationSetup setup;
  setup.release = release;
  return generate(weights, setup);
}

LoadedModel load_zoo(const std::string& name) {
  LoadOptions o;
  o.path = test::fixture("models/family-zoo/" + name).string();
  o.load_tokenizer = false;
  return load_model(o);
}

TEST(SlidingWindow, BlocksBehindTheWindowGoBackToThePool) {
  const auto path = test::fixture("models/family-zoo/phi3.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no family-zoo fixture";
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  const LoadedModel model = load_model(o);
  ASSERT_EQ(model.weights.config.sliding_window, 12);
  const Generation kept = generate(model.weights, /*release=*/false);
  const Generation released = generate(model.weights, /*release=*/true);
  ASSERT_EQ(kept.tokens[0].size(), 150u);
  ASSERT_EQ(kept.tokens[1].size(), 150u);
  EXPECT_EQ(released.tokens, kept.tokens);
  // Keeping every block: (20 + 150) and (27 + 150) positions in blocks of 4.
  EXPECT_GE(kept.peak_used_blocks, 80);
  // Released: per sequence the 12-position window spans at most 4 blocks, plus the block the
  // step writes into and one a chunk may reach into.
  EXPECT_LE(released.peak_used_blocks, 2 * 6);
  std::printf("[ window ] peak KV blocks: %lld kept, %lld released\n",
              static_cast<long long>(kept.peak_used_blocks),
              static_cast<long long>(released.peak_used_blocks));
}

TEST(SlidingWindow, GemmaSlidingLayersGiveBlocksBackWhileGlobalLayersKeepEveryPosition) {
  if (!std::filesystem::exists(test::fixture("models/family-zoo/gemma2.gguf"))) {
    GTEST_SKIP() << "no family-zoo fixture";
  }
  const LoadedModel model = load_zoo("gemma2.gguf");
  ASSERT_EQ(model.weights.config.sliding_window, 8);
  ASSERT_EQ(model.weights.config.n_layers, 26);
  GenerationSetup setup;
  setup.max_tokens = 60;
  setup.release = false;
  const Generation kept = generate(model.weights, setup);
  setup.release = true;
  const Generation apart = generate(model.weights, setup);
  ASSERT_EQ(kept.tokens[0].size(), 60u);
  ASSERT_EQ(kept.tokens[1].size(), 60u);
  EXPECT_EQ(apart.tokens, kept.tokens);
  // Kept together: one pool of every layer, every position resident: (20 + 60) and (27 + 60)
  // positions in blocks of 4.
  EXPECT_EQ(kept.main_layers, 26);
  EXPECT_EQ(kept.window_pool_blocks, 0);
  EXPECT_GE(kept.peak_used_blocks, 40);
  // Apart: the 13 global layers keep every position in the main pool; the 13 sliding layers' pool
  // holds per sequence the 8-position window (at most 3 blocks of 4), the block being written and
  // one a chunk reaches into.
  EXPECT_EQ(apart.main_layers, 13);
  EXPECT_EQ(apart.peak_used_blocks, kept.peak_used_blocks);
  EXPECT_GT(apart.peak_window_blocks, 0);
  EXPECT_LE(apart.peak_window_blocks, 2 * 5);
  // The window pool is sized for the window, not the context (2 x 64 positions): 2 sequences x
  // (2 + 2) blocks + 2 for a step's 8 tokens.
  EXPECT_EQ(apart.window_pool_blocks, 10);
  // /metrics shows the window pool beside the main one.
  EXPECT_FALSE(kept.metrics_window_pool);
  EXPECT_TRUE(apart.metrics_window_pool);
  EXPECT_EQ(apart.metrics_window_total, 10);
  EXPECT_EQ(apart.metrics_peak_window_used, apart.peak_window_blocks);
  EXPECT_NE(apart.rendered.find("# TYPE ember_kv_window_blocks_used gauge"), std::string::npos);
  EXPECT_NE(apart.rendered.find("ember_kv_window_blocks_total 10"), std::string::npos)
      << apart.rendered;
  std::printf(
      "[ window ] gemma2 peak KV blocks: %lld of 26 layers kept; %lld of 13 global layers "
      "+ %lld of 13 sliding layers apart\n",
      static_cast<long long>(kept.peak_used_blocks), static_cast<long long>(apart.peak_used_blocks),
      static_cast<long long>(apart.peak_window_blocks));
}

// Speculative guesses' K/V is written and then cut back when they are rejected: the window must
// not have moved past what the kept tokens need. Both ways of giving blocks back (Phi-3's one pool,
// Gemma 2's window pool), greedy and with seeded sampling (prompt lookup keeps a seeded run's
// tokens bit for bit). Gemma's zoo model repeats its last token, so its guesses are all kept; the
// next test rolls guesses back on purpose.
TEST(SlidingWindow, SpeculationKeepsTheTokens) {
  for (const char* name : {"phi3.gguf", "gemma2.gguf"}) {
    if (!std::filesystem::exists(test::fixture(std::string("models/family-zoo/") + name))) {
      GTEST_SKIP() << "no family-zoo fixture";
    }
    const LoadedModel model = load_zoo(name);
    int64_t rejected = 0;
    for (float temperature : {0.0f, 1.0f}) {
      SCOPED_TRACE(std::string(name) + " at temperature " + std::to_string(temperature));
      GenerationSetup plain;
      plain.release = false;
      plain.temperature = temperature;
      if (std::string(name) == "gemma2.gguf") plain.max_tokens = 60;
      GenerationSetup speculative = plain;
      speculative.release = true;
      speculative.lookup = 2;
      const Generation want = generate(model.weights, plain);
      const Generation got = generate(model.weights, speculative);
      EXPECT_EQ(got.tokens, want.tokens);
      EXPECT_GT(got.spec.verify_steps, 0);
      rejected += got.spec.drafted - got.spec.accepted;
    }
    if (std::string(name) == "phi3.gguf") {
      EXPECT_GT(rejected, 0) << "no guess was rolled back";
    }
  }
}

// The scheduler's side of it: a decoding sequence carries 3 guesses every step and all are cut off
// after the step; the tables must still hold every block the next token's window reads (window 6,
// blocks of 4), in the one pool (every layer slides) and in a window layers' pool.
TEST(SlidingWindow, RejectedGuessesNeverTakeTheWindowsBlocks) {
  for (const bool apart : {false, true}) {
    SCOPED_TRACE(apart ? "window pool" : "one pool");
    SchedulerConfig config;
    config.max_sequences = 1;
    if (apart) {
      config.window_layers_window = 6;
      config.window_pool_blocks = 16;
    } else {
      config.sliding_window = 6;
    }
    Scheduler scheduler(config, /*n_blocks=*/64, /*block_size=*/4, /*prefix_caching=*/false);
    auto owned = std::make_unique<Sequence>();
    Sequence& s = *owned;
    s.tokens.assign(10, 7);
    s.n_prompt = 10;
    s.max_tokens = 100;
    scheduler.add(std::move(owned));
    std::vector<std::unique_ptr<Sequence>> failed;
    for (int step = 0; step < 40; ++step) {
      const std::vector<ScheduledChunk> chunks = scheduler.schedule(failed);
      ASSERT_EQ(chunks.size(), 1u);
      ASSERT_EQ(chunks[0].n_tokens, s.pending_tokens());
      scheduler.commit(chunks[0]);
      // Verification keeps none of the guesses: the cache holds the sampled token only.
      s.n_cached -= s.n_draft;
      s.tokens.resize(static_cast<size_t>(s.n_cached));
      s.n_draft = 0;
      scheduler.truncate(s.block_table, s.window_table, s.n_cached);
      ASSERT_TRUE(scheduler.can_resume(s.block_table, s.window_table, s.n_cached))
          << "step " << step << ": the next token's window lost a block";
      // The next step: a newly sampled token and three guesses after it.
      s.tokens.insert(s.tokens.end(), {11, 12, 13, 14});
      s.n_draft = 3;
    }
    // Blocks behind the window did go back.
    const KvBlockTable& table = apart ? s.window_table : s.block_table;
    EXPECT_TRUE(KvBlockManager::has_released_blocks(table));
    if (apart) {
      EXPECT_FALSE(KvBlockManager::has_released_blocks(s.block_table));
    }
  }
}

struct FollowUp {
  std::vector<int32_t> tokens;  // the second turn's
  int64_t cached_prompt_tokens = 0;
};

// A chat's two turns: the second prompt is the first prompt, its answer and three more tokens.
FollowUp follow_up(const ModelWeights& weights, bool apart_and_cached) {
  LLMEngineOptions lo;
  lo.engine.max_context = 256;
  lo.engine.block_size = 4;
  lo.engine.release_window_blocks = apart_and_cached;
  lo.engine.prefix_caching = apart_and_cached;
  LLMEngine engine(weights, nullptr, lo);
  const auto run = [&](GenerationRequest req, FollowUp& out) {
    req.max_tokens = 40;
    auto stream = engine.add_request(std::move(req));
    while (engine.step()) {
      while (auto e = stream->pop(std::chrono::milliseconds(0))) {
        out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
        if (e->finished) out.cached_prompt_tokens = e->cached_prompt_tokens;
      }
    }
  };
  FollowUp first, second;
  GenerationRequest req = make_request(0);
  run(req, first);
  req.prompt.insert(req.prompt.end(), first.tokens.begin(), first.tokens.end());
  req.prompt.insert(req.prompt.end(), {5, 6, 7});
  run(req, second);
  return second;
}

// The second turn finds the conversation in both pools (the window pool still caches the blocks
// the prefix's last window needs) and gives the tokens an engine without any cache gives.
TEST(SlidingWindow, GemmaFollowUpFindsItsPrefixInBothPools) {
  if (!std::filesystem::exists(test::fixture("models/family-zoo/gemma2.gguf"))) {
    GTEST_SKIP() << "no family-zoo fixture";
  }
  const LoadedModel model = load_zoo("gemma2.gguf");
  const FollowUp want = follow_up(model.weights, false);
  const FollowUp got = follow_up(model.weights, true);
  ASSERT_EQ(want.tokens.size(), 40u);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(want.cached_prompt_tokens, 0);
  // 63 prompt tokens; the first turn cached 59 positions: 14 full blocks of 4.
  EXPECT_EQ(got.cached_prompt_tokens, 56);
}

// What serve sizes its pool by (kv_pool_costs): with Gemma's sliding layers apart a main block
// holds the 13 global layers only, and the window pool's size is set apart (4 sequences x (8
// positions in blocks of 16: 1, plus 2) + a 512-token step's 32 blocks); kept together (offload
// tiers on) a block holds all 26 layers and there is no window pool.
TEST(SlidingWindow, PoolCostsCountTheGlobalLayersAndTheWindowPool) {
  if (!std::filesystem::exists(test::fixture("models/family-zoo/gemma2.gguf"))) {
    GTEST_SKIP() << "no family-zoo fixture";
  }
  const LoadedModel model = load_zoo("gemma2.gguf");
  EngineOptions eo;
  eo.block_size = 16;
  eo.max_sequences = 4;
  eo.max_step_tokens = 512;
  const int64_t layer_block = 16 * 2 * 2 * 64 * 4;  // 16 tokens x K,V x 2 kv heads x 64 x f32
  KvPoolCosts costs = kv_pool_costs(model.weights, eo);
  EXPECT_EQ(costs.block_bytes, 13 * layer_block);
  EXPECT_EQ(costs.window_block_bytes, 13 * layer_block);
  EXPECT_EQ(costs.window_blocks, 4 * 3 + 32);
  eo.kv_tiers.ram_bytes = int64_t{1} << 20;
  costs = kv_pool_costs(model.weights, eo);
  EXPECT_EQ(costs.block_bytes, 26 * layer_block);
  EXPECT_EQ(costs.window_blocks, 0);
}

}  // namespace
}  // namespace ember
