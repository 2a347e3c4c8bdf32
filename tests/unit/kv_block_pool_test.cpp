#include <gtest/gtest.h>

#include "ember/kv/kv_block_pool.h"
#include "ember/kv/kv_block_table.h"

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

TEST(KvBlockPool, AllocateReleaseAndRefCounts) {
  KvBlockPool pool(small_shape(3));
  EXPECT_EQ(pool.free_blocks(), 3);
  int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(pool.allocate(), -1);  // exhausted
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.free_blocks(), 0);  // still held once
  pool.release(b);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_THROW(pool.release(b), std::runtime_error);  // double free is caught
  pool.release(a);
  pool.release(c);
  EXPECT_EQ(pool.free_blocks(), 3);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(KvBlockPool, BytesPerTokenCountsKAndVOfEveryLayer) {
  KvBlockPool pool(small_shape(1));
  EXPECT_EQ(pool.bytes_per_token(), 2 * 2 * 2 * 8 * 4);  // L x {K,V} x n_kv x head_dim x f32
  EXPECT_EQ(pool.bytes_per_block(), pool.bytes_per_token() * 4);
}

TEST(KvBlockTable, GrowsByBlocksAndReturnsEverything) {
  KvBlockPool pool(small_shape(4));
  KvBlockTable table;
  ASSERT_TRUE(table.reserve(pool, 1));
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.reserve(pool, 4));
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.reserve(pool, 9));
  EXPECT_EQ(table.blocks().size(), 3u);
  EXPECT_EQ(table.capacity(pool), 12);
  EXPECT_FALSE(table.reserve(pool, 17));  // needs 5 blocks, pool has 4
  EXPECT_EQ(table.blocks().size(), 3u);   // nothing taken on failure
  table.release(pool);
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(pool.free_blocks(), 4);
}

TEST(KvBlockPool, LayerViewsDoNotOverlap) {
  KvBlockPool pool(small_shape(2));
  cpu::PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  EXPECT_EQ(l1.k_pool - l0.k_pool, 2 * 4 * 2 * 8);
  EXPECT_NE(l0.k_pool, l0.v_pool);
  EXPECT_EQ(pool.slot_offset(1, 3), (1 * 4 + 3) * 2 * 8);
}

}  // namespace
}  // namespace ember
