// The cpu (and reference) backends' KV storage: sizes, the per-layer [block, kv head, slot,
// head_dim] layout the attention kernels read, and the dtypes it accepts.
#include <gtest/gtest.h>

#include "ember/backend/cpu/host_kv_storage.h"
#include "ember/core/error.h"

namespace ember::cpu {
namespace {

KvShape small_shape(int64_t blocks) {
  KvShape s;
  s.n_layers = 2;
  s.n_blocks = blocks;
  s.block_size = 4;
  s.n_kv_heads = 2;
  s.head_dim = 8;
  return s;
}

TEST(HostKvStorage, BytesPerTokenAndLayout) {
  HostKvStorage pool(small_shape(2));
  EXPECT_EQ(pool.shape().bytes_per_token(),
            2 * 2 * 2 * 8 * 4);  // L x {K,V} x n_kv x head_dim x f32
  EXPECT_EQ(pool.shape().bytes_per_block(), pool.shape().bytes_per_token() * 4);
  PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
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

TEST(HostKvStorage, F16PoolHalvesTheBytes) {
  KvShape shape = small_shape(2);
  shape.dtype = DType::F16;
  HostKvStorage pool(shape);
  EXPECT_EQ(pool.shape().bytes_per_token(), 2 * 2 * 2 * 8 * 2);
  PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  EXPECT_EQ(l0.dtype, DType::F16);
  EXPECT_EQ(static_cast<const uint8_t*>(l1.v_pool) - static_cast<const uint8_t*>(l0.v_pool),
            2 * 4 * 2 * 8 * 2);
  EXPECT_EQ(static_cast<const uint8_t*>(pool.v_at(0, 5)) - static_cast<const uint8_t*>(l0.v_pool),
            5 * 2);
  shape.dtype = DType::BF16;
  EXPECT_THROW(HostKvStorage{shape}, Error);
}

}  // namespace
}  // namespace ember::cpu
