// What a KV pool costs beside the weights (KvPoolCosts, model_runner.h), which serve sizes its pool
// by: the pool's blocks, the exact rows a per-channel q4_0 K keeps beside it (up to
// kv_channel_exact_blocks_cap blocks), and a draft model's K/V in each block and its weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "ember/backend/kv_channel_blocks.h"
#include "ember/engine/draft_proposer.h"
#include "ember/engine/model_runner.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

// stories260K: 5 layers, 4 kv heads of 8 values; blocks of 16 tokens; a q4_0 cache (K per channel
// by default).
constexpr int64_t kLayers = 5, kKvHeads = 4, kHeadDim = 8, kBlock = 16;

class KvPoolCosts : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no stories260K fixture";
    LoadOptions o;
    o.path = path.string();
    o.load_tokenizer = false;
    model_ = std::make_unique<LoadedModel>(load_model(o));
    eo_.block_size = kBlock;
    eo_.kv_dtype = DType::Q4_0;
  }
  std::unique_ptr<LoadedModel> model_;
  EngineOptions eo_;
};

TEST_F(KvPoolCosts, PerChannelKCountsItsExactRowsBesideThePool) {
  const ember::KvPoolCosts costs = kv_pool_costs(model_->weights, eo_);
  // f16 rows of every layer and kv head of a block.
  EXPECT_EQ(costs.exact_block_bytes, kLayers * kKvHeads * kBlock * kHeadDim * 2);
  for (int64_t n : {1, 100, 1000, 50000}) {
    const int64_t want =
        n * costs.block_bytes + kv_channel_exact_blocks_cap(n) * costs.exact_block_bytes;
    EXPECT_EQ(costs.bytes_for(n), want) << n;
    EXPECT_EQ(costs.exact_rows_bytes(n), want - n * costs.block_bytes) << n;
    // The largest pool a budget pays for, exactly.
    EXPECT_EQ(costs.blocks_within(want), n) << n;
    EXPECT_EQ(costs.blocks_within(want - 1), n - 1) << n;
  }
  EXPECT_EQ(costs.blocks_within(costs.bytes_for(0) - 1), 0);

  eo_.kv_k_channel = false;  // q4_0's groups: nothing beside the pool
  const ember::KvPoolCosts groups = kv_pool_costs(model_->weights, eo_);
  EXPECT_EQ(groups.exact_block_bytes, 0);
  EXPECT_EQ(groups.bytes_for(1000), 1000 * groups.block_bytes);
  EXPECT_EQ(groups.exact_rows_bytes(1000), 0);
}

TEST_F(KvPoolCosts, ADraftsPoolAndWeightsComeOutOfTheSameBudget) {
  const ModelWeights& weights = model_->weights;
  const ember::KvPoolCosts alone = kv_pool_costs(weights, eo_);

  // An early exit after 2 of the 5 layers: a pool of 2 layers' blocks, no weights of its own.
  ember::KvPoolCosts exit = alone;
  add_draft_pool_costs(weights, 2, /*copy=*/false, eo_, exit);
  EXPECT_EQ(exit.draft_block_bytes * kLayers, alone.block_bytes * 2);
  EXPECT_EQ(exit.draft_exact_block_bytes * kLayers, alone.exact_block_bytes * 2);
  EXPECT_EQ(exit.draft_weight_bytes, 0);
  const int64_t n = 1000;
  EXPECT_EQ(exit.bytes_for(n), alone.bytes_for(n) + n * exit.draft_block_bytes +
                                   kv_channel_exact_blocks_cap(n) * exit.draft_exact_block_bytes);

  // A whole copy (--draft-dtype, or --draft MODEL): a pool like the model's, and its weights.
  ember::KvPoolCosts copy = alone;
  add_draft_pool_costs(weights, 0, /*copy=*/true, eo_, copy);
  EXPECT_EQ(copy.draft_block_bytes, alone.block_bytes);
  EXPECT_EQ(copy.draft_weight_bytes, weights.matrix_bytes());
  EXPECT_EQ(copy.bytes_for(n), 2 * alone.bytes_for(n) + weights.matrix_bytes());
  // The same budget holds fewer blocks with a draft beside them.
  const int64_t budget = alone.bytes_for(n);
  EXPECT_EQ(alone.blocks_within(budget), n);
  EXPECT_LT(exit.blocks_within(budget), n);
  EXPECT_LT(copy.blocks_within(budget), exit.blocks_within(budget));
  EXPECT_LE(copy.bytes_for(copy.blocks_within(budget)), budget);
}

}  // namespace
}  // namespace ember
