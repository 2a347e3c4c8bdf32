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
  EXPECT_EQ(l0.k_dtype, DType::F32);
  EXPECT_EQ(l0.v_dtype, DType::F32);
  // [block, kv head, slot] rows of head_dim: block 1, head 1, slot 3.
  EXPECT_EQ(pool.row_index(1, 3, 1), (1 * 2 + 1) * 4 + 3);
  EXPECT_EQ(pool.row_index(1, 3, 1), l1.row_index(1, 3, 1));
  EXPECT_EQ(bytes_between(l1.k_pool, pool.k_at(1, pool.row_index(1, 3, 1))),
            ((1 * 2 + 1) * 4 + 3) * 8 * 4);
  EXPECT_EQ(l1.k_row(pool.row_index(1, 3, 1)), pool.k_at(1, pool.row_index(1, 3, 1)));
}

TEST(HostKvStorage, F16PoolHalvesTheBytes) {
  KvShape shape = small_shape(2);
  shape.set_dtype(DType::F16);
  HostKvStorage pool(shape);
  EXPECT_EQ(pool.shape().bytes_per_token(), 2 * 2 * 2 * 8 * 2);
  PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  EXPECT_EQ(l0.k_dtype, DType::F16);
  EXPECT_EQ(static_cast<const uint8_t*>(l1.v_pool) - static_cast<const uint8_t*>(l0.v_pool),
            2 * 4 * 2 * 8 * 2);
  EXPECT_EQ(static_cast<const uint8_t*>(pool.v_at(0, 5)) - static_cast<const uint8_t*>(l0.v_pool),
            5 * 8 * 2);          // row 5 of head_dim 8 halves
  shape.set_dtype(DType::Q4_K);  // not a KV dtype
  EXPECT_THROW(HostKvStorage{shape}, Error);
}

// Quantized rows: head_dim 8 stores one group of 8 (f16 scale + 8 int8 = 10 bytes for q8_0, + 4
// nibble bytes = 6 for q4_0); K and V may differ, each array sized by its own rows.
TEST(HostKvStorage, QuantizedAndMixedRows) {
  KvShape shape = small_shape(2);
  shape.k_dtype = DType::Q8_0;
  shape.v_dtype = DType::Q4_0;
  HostKvStorage pool(shape);
  EXPECT_EQ(shape.k_row_bytes(), 10);
  EXPECT_EQ(shape.v_row_bytes(), 6);
  EXPECT_EQ(pool.shape().bytes_per_token(), 2 * 2 * (10 + 6));
  EXPECT_EQ(shape.dtype_label(), "q8_0/q4_0");
  PagedKv l0 = pool.layer_view(0), l1 = pool.layer_view(1);
  EXPECT_EQ(l0.k_row_bytes, 10);
  EXPECT_EQ(l0.v_row_bytes, 6);
  EXPECT_EQ(static_cast<const uint8_t*>(l1.k_pool) - static_cast<const uint8_t*>(l0.k_pool),
            2 * 4 * 2 * 10);
  EXPECT_EQ(static_cast<const uint8_t*>(l1.v_pool) - static_cast<const uint8_t*>(l0.v_pool),
            2 * 4 * 2 * 6);
  shape.head_dim = 20;  // not a multiple of 8: no quantization group fits
  EXPECT_THROW(HostKvStorage{shape}, Error);
}

}  // namespace
}  // namespace ember::cpu
