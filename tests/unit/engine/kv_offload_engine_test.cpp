// The offload tiers inside the engine: a prefix whose cached blocks were pushed out of a small
// pool comes back from RAM (and, across a restart, from disk) instead of being recomputed, and the
// logits are those of the cold run; another KV dtype never reads those entries; offload without
// prefix caching is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

class KvOffloadEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = test::fixture("models/stories260K/stories260K.gguf");
    if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    LoadOptions o;
    o.path = path.string();
    o.load_tokenizer = false;
    model_ = std::make_unique<LoadedModel>(load_model(o));
    dir_ = test::scratch_dir(std::string("kv-offload-") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name()) /
           "tier";
  }

  // 8 blocks of 8 tokens: two 45-token prompts cannot both stay cached.
  LLMEngineOptions options(const KvTierOptions& tiers) const {
    LLMEngineOptions eo;
    eo.engine.max_context = 64;
    eo.engine.block_size = 8;
    eo.engine.kv_blocks = 8;
    eo.engine.prefix_caching = true;
    eo.engine.kv_tiers = tiers;
    eo.scheduler.max_batched_tokens = 64;
    return eo;
  }

  static std::vector<int32_t> prompt(int salt) {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < 45; ++i) p.push_back(3 + (i * 37 + salt * 101) % 500);
    return p;
  }

  // The last prompt position's logits and the prompt tokens found cached.
  std::pair<std::vector<float>, int64_t> score(LLMEngine& engine, const std::vector<int32_t>& p) {
    GenerationRequest r;
    r.prompt = p;
    r.max_tokens = 0;
    r.prompt_logits = true;
    std::vector<float> logits;
    int64_t cached = 0;
    auto stream = engine.add_request(std::move(r));
    run_until_finished(engine, *stream, [&](StreamEvent& e) {
      logits.insert(logits.end(), e.prompt_logits.begin(), e.prompt_logits.end());
      if (e.finished) cached = e.cached_prompt_tokens;
    });
    const auto V = static_cast<size_t>(model_->weights.config.vocab_size);
    return {std::vector<float>(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end()),
            cached};
  }

  static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
    return d;
  }

  std::unique_ptr<LoadedModel> model_;
  fs::path dir_;
};

TEST_F(KvOffloadEngine, EvictedPrefixComesBackFromRam) {
  KvTierOptions tiers;
  tiers.ram_bytes = 1 << 20;
  LLMEngine engine(model_->weights, nullptr, options(tiers));
  const auto [cold, cold_cached] = score(engine, prompt(0));
  EXPECT_EQ(cold_cached, 0);
  score(engine, prompt(1));  // needs 6 of the 8 blocks: most of prompt 0's cached ones leave
  EXPECT_GT(engine.kv().stats().spilled_blocks, 0);
  const auto [warm, warm_cached] = score(engine, prompt(0));
  EXPECT_EQ(warm_cached, 40);  // 5 full blocks, from the pool or restored
  EXPECT_GT(engine.kv().stats().restored_blocks, 0);
  const KvTierStats s = engine.kv_tier_stats();
  EXPECT_EQ(s.ram.hits, engine.kv().stats().restored_blocks);
  EXPECT_GT(s.ram.bytes_read, 0);
  EXPECT_LE(max_abs_diff(warm, cold), 1e-4);  // the same K/V bytes; only the tiles differ
  const std::string metrics = engine.metrics().render_prometheus();
  EXPECT_NE(metrics.find("ember_kv_offload_ram_hits_total"), std::string::npos);
  EXPECT_NE(metrics.find("ember_prefix_cache_restored_blocks_total"), std::string::npos);
}

// A q4_0 cache stores K per channel, a block sealed once its sequence moves past it. A prompt that
// ends exactly at a block's end leaves that block full, cached and never sealed by a step: spilled
// to the RAM tier (read_block seals it) or found in the pool (the next sequence's step seals it),
// it must read as a cold run's sealed block does.
TEST_F(KvOffloadEngine, PerChannelQ4KBlocksComeBackSealed) {
  KvTierOptions tiers;
  tiers.ram_bytes = 1 << 20;
  LLMEngineOptions eo = options(tiers);
  eo.engine.kv_dtype = DType::Q4_0;
  std::vector<float> cold;
  {
    LLMEngine fresh(model_->weights, nullptr, eo);
    ASSERT_TRUE(fresh.runner().kv_shape().k_channel_scales);
    cold = score(fresh, prompt(0)).first;
  }
  LLMEngine engine(model_->weights, nullptr, eo);
  const std::vector<int32_t> p0 = prompt(0);
  score(engine, std::vector<int32_t>(p0.begin(), p0.begin() + 40));  // 5 full blocks of 8
  score(engine, prompt(1));
  EXPECT_GT(engine.kv().stats().spilled_blocks, 0);
  const auto [warm, cached] = score(engine, p0);
  EXPECT_EQ(cached, 40);
  EXPECT_GT(engine.kv().stats().restored_blocks, 0);
  EXPECT_LE(max_abs_diff(warm, cold), 1e-4);
  // The exact rows of the blocks last written, beside the pool, are in /metrics: each block's
  // K of every layer and kv head in f16.
  const KvShape& s = engine.runner().kv_shape();
  const int64_t block_exact = s.n_layers * s.n_kv_heads * s.block_size * s.head_dim * 2;
  const std::string metrics = engine.metrics().render_prometheus();
  const size_t at = metrics.find("\nember_kv_side_bytes ");
  ASSERT_NE(at, std::string::npos) << metrics;
  const double side = std::stod(metrics.substr(at + 21));
  EXPECT_GT(side, 0);
  EXPECT_EQ(static_cast<int64_t>(side) % block_exact, 0);
  EXPECT_EQ(static_cast<int64_t>(side), engine.runner().kv_side_bytes());
}

// The engine spills its cached blocks and the RAM tier to disk when it ends; a new engine on the
// same directory (a restart) serves the prefix from disk. Another KV dtype has its own entries.
TEST_F(KvOffloadEngine, DiskTierServesAPrefixAfterARestart) {
  KvTierOptions tiers;
  tiers.ram_bytes = 1 << 20;
  tiers.disk_dir = dir_.string();
  std::vector<float> cold;
  {
    LLMEngine first(model_->weights, nullptr, options(tiers));
    cold = score(first, prompt(2)).first;
  }
  EXPECT_FALSE(fs::is_empty(dir_));
  LLMEngine restarted(model_->weights, nullptr, options(tiers));
  EXPECT_EQ(restarted.kv_tier_stats().disk.entries, 5);
  const auto [warm, cached] = score(restarted, prompt(2));
  EXPECT_EQ(cached, 40);
  EXPECT_EQ(restarted.kv_tier_stats().disk.hits, 5);
  EXPECT_LE(max_abs_diff(warm, cold), 1e-4);

  LLMEngineOptions f16 = options(tiers);
  f16.engine.kv_dtype = DType::F16;
  LLMEngine other_dtype(model_->weights, nullptr, f16);
  EXPECT_EQ(other_dtype.kv_tier_stats().disk.entries, 0);
  EXPECT_EQ(score(other_dtype, prompt(2)).second, 0);
}

TEST_F(KvOffloadEngine, OffloadWithoutPrefixCachingIsRefused) {
  KvTierOptions tiers;
  tiers.ram_bytes = 1 << 20;
  LLMEngineOptions eo = options(tiers);
  eo.engine.prefix_caching = false;
  try {
    LLMEngine engine(model_->weights, nullptr, eo);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix caching"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember
