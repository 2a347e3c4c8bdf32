// A paged KV pool with random contents for the attention tests: rows in any cache dtype, blocks
// placed through a shuffled block table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/kv_row_format.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::test {

using cpu::PagedKv;

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, block_size, ctx_len;
};

// A pool of n_blocks blocks with random contents and a shuffled (non-contiguous) block table.
struct Pool {
  std::vector<float> k, v;      // the values, one head_dim row per (block, kv head, slot)
  std::vector<uint8_t> kb, vb;  // the same rows as stored in the cache's dtypes
  std::vector<int32_t> table;
  PagedKv kv;
};

// The dtypes every attention test runs with; a quantized one only where head_dim allows.
constexpr DType kKvDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

inline Pool make_pool(const Case& c, uint32_t seed, DType dtype = DType::F32,
                      std::optional<DType> v_dtype = std::nullopt) {
  Pool p;
  const int64_t n_table = (c.ctx_len + c.block_size - 1) / c.block_size;
  const int64_t n_blocks = n_table + 7;  // spare blocks the sequence does not own
  const int64_t n_rows = n_blocks * c.block_size * c.n_kv_heads, hd = c.head_dim;
  p.k = random_floats(n_rows * hd, seed);
  p.v = random_floats(n_rows * hd, seed + 1);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed + 2));
  p.table.assign(ids.begin(), ids.begin() + n_table);
  p.kv.k_dtype = dtype;
  p.kv.v_dtype = v_dtype.value_or(dtype);
  p.kv.k_row_bytes = kv_row_bytes(p.kv.k_dtype, hd);
  p.kv.v_row_bytes = kv_row_bytes(p.kv.v_dtype, hd);
  p.kb.resize(static_cast<size_t>(n_rows * p.kv.k_row_bytes));
  p.vb.resize(static_cast<size_t>(n_rows * p.kv.v_row_bytes));
  for (int64_t r = 0; r < n_rows; ++r) {
    kv_write_row(p.k.data() + r * hd, hd, p.kv.k_dtype, p.kb.data() + r * p.kv.k_row_bytes);
    kv_write_row(p.v.data() + r * hd, hd, p.kv.v_dtype, p.vb.data() + r * p.kv.v_row_bytes);
  }
  p.kv.k_pool = p.kb.data();
  p.kv.v_pool = p.vb.data();
  p.kv.block_size = c.block_size;
  p.kv.n_kv_heads = c.n_kv_heads;
  p.kv.head_dim = c.head_dim;
  return p;
}

}  // namespace ember::test
