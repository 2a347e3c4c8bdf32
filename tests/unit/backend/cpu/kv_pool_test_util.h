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
#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/half.h"
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

// A pool whose K is stored per channel (kv_channel_blocks.h): every block sealed from p.k, and
// exact rows (k_exact) that differ from those values by `exact_shift`, so a test sees which of the
// two a query read. V in v_dtype.
struct ChannelPool : Pool {
  std::vector<std::vector<uint16_t>> exact;  // per block: [n_kv_heads, block_size, head_dim] f16
  std::vector<const uint16_t*> exact_ptrs;
  float exact_shift = 0.0f;

  // What a query at position query_pos reads as key `pos` of kv head g: the exact row in its own
  // block, the sealed one elsewhere (f32 [head_dim]).
  std::vector<float> key_seen(int64_t pos, int64_t query_pos, int64_t g) const {
    const int64_t bs = kv.block_size, hd = kv.head_dim, block = table[pos / bs];
    std::vector<float> k(static_cast<size_t>(hd));
    if (pos / bs == query_pos / bs) {
      const uint16_t* row = exact[block].data() + (g * bs + pos % bs) * hd;
      for (int64_t d = 0; d < hd; ++d) k[d] = f16_to_f32(row[d]);
    } else {
      kv_channel_read_row(kv.k_region(block, g), pos % bs, hd, bs, k.data());
    }
    return k;
  }
};

inline ChannelPool make_channel_pool(const Case& c, uint32_t seed, DType v_dtype,
                                     float exact_shift) {
  ChannelPool p;
  static_cast<Pool&>(p) = make_pool(c, seed, v_dtype);
  const int64_t hd = c.head_dim, bs = c.block_size, n_kv = c.n_kv_heads;
  const auto n_blocks = static_cast<int64_t>(p.k.size()) / (hd * bs * n_kv);
  p.kv.k_dtype = DType::Q4_0;
  p.kv.k_channel = true;
  p.kv.k_row_bytes = kv_channel_row_bytes(hd, bs);
  p.kb.assign(static_cast<size_t>(n_blocks * n_kv * bs * p.kv.k_row_bytes), 0);
  p.kv.k_pool = p.kb.data();
  p.exact_shift = exact_shift;
  p.exact.resize(static_cast<size_t>(n_blocks));
  std::vector<uint16_t> rows(static_cast<size_t>(bs * hd));
  for (int64_t b = 0; b < n_blocks; ++b) {
    auto& e = p.exact[static_cast<size_t>(b)];
    e.resize(static_cast<size_t>(n_kv * bs * hd));
    for (int64_t g = 0; g < n_kv; ++g) {
      const float* src = p.k.data() + p.kv.row_index(b, 0, g) * hd;  // bs rows of this head
      for (int64_t i = 0; i < bs * hd; ++i) {
        rows[static_cast<size_t>(i)] = f32_to_f16(src[i]);
        e[static_cast<size_t>(g * bs * hd + i)] = f32_to_f16(src[i] + exact_shift);
      }
      kv_channel_quantize(rows.data(), hd, bs,
                          p.kb.data() + p.kv.row_index(b, 0, g) * p.kv.k_row_bytes);
    }
    p.exact_ptrs.push_back(e.data());
  }
  p.kv.k_exact = p.exact_ptrs.data();
  p.kv.k_exact_offset = 0;
  return p;
}

}  // namespace ember::test
