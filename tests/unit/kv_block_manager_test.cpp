#include <gtest/gtest.h>

#include <numeric>

#include "ember/core/error.h"
#include "ember/kv/kv_block_manager.h"

namespace ember {
namespace {

KvPoolShape small_shape(int64_t blocks) {
  KvPoolShape s;
  s.n_layers = 2;
  s.n_blocks = blocks;
  s.block_size = 4;
  s.n_kv_heads = 2;
  s.head_dim = 8;
  return s;
}

std::vector<int32_t> iota_tokens(int n, int start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvBlockPool, BytesPerTokenAndLayout) {
  KvBlockPool pool(small_shape(2));
  EXPECT_EQ(pool.bytes_per_token(), 2 * 2 * 2 * 8 * 4);  // L x {K,V} x n_kv x head_dim x f32
  EXPECT_EQ(pool.bytes_per_block(), pool.bytes_per_token() * 4);
  cpu::PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  const auto bytes_between = [](const void* a, const void* b) {
    return static_cast<const uint8_t*>(b) - static_cast<const uint8_t*>(a);
  };
  EXPECT_EQ(bytes_between(l0.k_pool, l1.k_pool), 2 * 4 * 2 * 8 * 4);
  EXPECT_EQ(l0.dtype, DType::F32);
  // [block, kv head, slot, head_dim]: block 1, head 1, slot 3.
  EXPECT_EQ(pool.row_offset(1, 3, 1), ((1 * 2 + 1) * 4 + 3) * 8);
  EXPECT_EQ(pool.row_offset(1, 3, 1), l1.row_offset(1, 3, 1));
  EXPECT_EQ(bytes_between(l1.k_pool, pool.k_at(1, pool.row_offset(1, 3, 1))),
            ((1 * 2 + 1) * 4 + 3) * 8 * 4);
}

TEST(KvBlockPool, F16PoolHalvesTheBytes) {
  KvPoolShape shape = small_shape(2);
  shape.dtype = DType::F16;
  KvBlockPool pool(shape);
  EXPECT_EQ(pool.bytes_per_token(), 2 * 2 * 2 * 8 * 2);
  cpu::PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  EXPECT_EQ(l0.dtype, DType::F16);
  EXPECT_EQ(static_cast<const uint8_t*>(l1.v_pool) - static_cast<const uint8_t*>(l0.v_pool),
            2 * 4 * 2 * 8 * 2);
  EXPECT_EQ(static_cast<const uint8_t*>(pool.v_at(0, 5)) - static_cast<const uint8_t*>(l0.v_pool),
            5 * 2);
  shape.dtype = DType::BF16;
  EXPECT_THROW(KvBlockPool{shape}, Error);
}

TEST(KvBlockManager, ReserveGrowsByBlocksAndReleaseReturnsEverything) {
  KvBlockManager kv(small_shape(4), /*prefix_caching=*/false);
  KvBlockTable table;
  ASSERT_TRUE(kv.reserve(table, 1));
  EXPECT_EQ(table.blocks.size(), 1u);
  ASSERT_TRUE(kv.reserve(table, 4));
  EXPECT_EQ(table.blocks.size(), 1u);
  ASSERT_TRUE(kv.reserve(table, 9));
  EXPECT_EQ(table.blocks.size(), 3u);
  EXPECT_EQ(kv.used_blocks(), 3);
  EXPECT_FALSE(kv.reserve(table, 17));  // needs 5 blocks, the pool has 4
  EXPECT_EQ(table.blocks.size(), 3u);   // nothing taken on failure
  kv.release(table);
  EXPECT_TRUE(table.blocks.empty());
  EXPECT_EQ(kv.available_blocks(), 4);
  EXPECT_EQ(kv.used_blocks(), 0);
}

TEST(KvBlockManager, PrefixBlocksAreSharedAndCountedOnce) {
  KvBlockManager kv(small_shape(8), /*prefix_caching=*/true);
  auto tokens = iota_tokens(10);  // blocks: [0..3] [4..7] [8..9]
  KvBlockTable a;
  EXPECT_EQ(kv.match_prefix(a, tokens), 0);
  ASSERT_TRUE(kv.reserve(a, 10));
  kv.commit(a, tokens);
  EXPECT_EQ(a.hashes.size(), 2u);  // only full blocks are hashed

  KvBlockTable b;
  EXPECT_EQ(kv.match_prefix(b, tokens), 8);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(kv.ref_count(a.blocks[0]), 2);
  EXPECT_EQ(kv.stats().hit_blocks, 2);
  ASSERT_TRUE(kv.reserve(b, 10));
  EXPECT_NE(b.blocks[2], a.blocks[2]);  // the partial block is private
  EXPECT_EQ(kv.used_blocks(), 4);

  // A different second block breaks the chain after the first.
  auto other = tokens;
  other[5] = 7;
  KvBlockTable c;
  EXPECT_EQ(kv.match_prefix(c, other), 4);
  kv.release(c);
  kv.release(b);
  kv.release(a);
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_EQ(kv.cached_blocks(), 2);  // freed but still cached
  EXPECT_EQ(kv.available_blocks(), 8);
}

TEST(KvBlockManager, NeverMatchesTheBlockHoldingTheLastToken) {
  KvBlockManager kv(small_shape(8), true);
  auto tokens = iota_tokens(8);  // exactly two full blocks
  KvBlockTable a;
  ASSERT_TRUE(kv.reserve(a, 8));
  kv.commit(a, tokens);
  kv.release(a);
  KvBlockTable b;
  EXPECT_EQ(kv.match_prefix(b, tokens), 4);  // the last token must be computed for its logits
  kv.release(b);
}

TEST(KvBlockManager, CachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  KvBlockManager kv(small_shape(4), true);
  auto first = iota_tokens(9, 0), second = iota_tokens(9, 500);
  KvBlockTable a, b;
  ASSERT_TRUE(kv.reserve(a, 9));
  kv.commit(a, first);
  kv.release(a);  // 2 cached + 1 free
  EXPECT_EQ(kv.cached_blocks(), 2);
  ASSERT_TRUE(kv.reserve(b, 9));  // takes the free block, then evicts cached ones
  kv.commit(b, second);
  EXPECT_LT(kv.cached_blocks(), 2);
  kv.release(b);
  KvBlockTable c;
  EXPECT_EQ(kv.match_prefix(c, second), 8);  // the newest content survives
  kv.release(c);
  EXPECT_EQ(kv.used_blocks(), 0);
}

TEST(KvBlockManager, DoubleReleaseIsAnError) {
  KvBlockManager kv(small_shape(2), false);
  KvBlockTable a;
  ASSERT_TRUE(kv.reserve(a, 1));
  KvBlockTable copy = a;
  kv.release(a);
  EXPECT_THROW(kv.release(copy), std::runtime_error);
}

}  // namespace
}  // namespace ember
