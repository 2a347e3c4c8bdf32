// HostKvStorage's books for per-channel K (KvShape::k_channel_scales, kv_channel_blocks.h): when a
// block is sealed, that read_block seals what no step has, that write_block's blocks read as
// sealed, and that exact rows stay bounded without a sequence ever losing its own block's.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ember/backend/batch.h"
#include "ember/backend/cpu/host_kv_storage.h"
#include "ember/backend/kv_channel_blocks.h"
#include "ember/core/error.h"
#include "ember/core/half.h"

namespace ember::cpu {
namespace {

KvShape channel_shape(int64_t blocks) {
  KvShape s;
  s.n_layers = 2;
  s.n_blocks = blocks;
  s.block_size = 4;
  s.n_kv_heads = 2;
  s.head_dim = 8;
  s.set_dtype(DType::Q4_0);
  s.k_channel_scales = true;
  return s;
}

// The value written at (position, layer, kv head, channel): distinct everywhere.
float value_at(int64_t pos, int64_t layer, int64_t g, int64_t d) {
  return 0.01f * static_cast<float>(pos * 7 + layer * 3 + g * 5 + d) - 1.0f + (d == 2 ? 20.0f : 0);
}

// One step of one sequence: tokens [start, start + n) written into every layer as a backend does.
void step(HostKvStorage& kv, const std::vector<int32_t>& table, int64_t start, int64_t n) {
  Batch batch;
  for (int64_t i = 0; i < n; ++i) batch.tokens.push_back(1);
  batch.sequences.push_back({table.data(), start, n, nullptr});
  batch.finalize();
  const KvShape& s = kv.shape();
  for (int64_t layer = 0; layer < s.n_layers; ++layer) {
    kv.begin_k_writes(layer, batch);
    for (int64_t pos = start; pos < start + n; ++pos) {
      for (int64_t g = 0; g < s.n_kv_heads; ++g) {
        uint16_t* row = kv.k_exact_row(layer, table[pos / s.block_size], pos % s.block_size, g);
        for (int64_t d = 0; d < s.head_dim; ++d) row[d] = f32_to_f16(value_at(pos, layer, g, d));
      }
    }
    kv.seal_k_blocks(layer, batch);
  }
}

// The region (layer, block, kv head) should hold: the block's positions quantized per channel.
std::vector<uint8_t> expected_region(const KvShape& s, int64_t first_pos, int64_t layer,
                                     int64_t g) {
  std::vector<uint16_t> rows(static_cast<size_t>(s.block_size * s.head_dim));
  for (int64_t r = 0; r < s.block_size; ++r) {
    for (int64_t d = 0; d < s.head_dim; ++d) {
      rows[static_cast<size_t>(r * s.head_dim + d)] =
          f32_to_f16(value_at(first_pos + r, layer, g, d));
    }
  }
  std::vector<uint8_t> region(static_cast<size_t>(s.block_size * s.k_row_bytes()));
  kv_channel_quantize(rows.data(), s.head_dim, s.block_size, region.data());
  return region;
}

bool region_is(const HostKvStorage& kv, int32_t block, int64_t layer, int64_t g,
               const std::vector<uint8_t>& want) {
  const PagedKv view = kv.layer_view(layer);
  return std::memcmp(view.k_region(block, g), want.data(), want.size()) == 0;
}

TEST(HostKvChannel, ABlockIsSealedWhenItsSequenceMovesPastIt) {
  HostKvStorage kv(channel_shape(8));
  const KvShape& s = kv.shape();
  EXPECT_EQ(s.k_row_bytes(), 4 + 8);  // 4 nibble bytes + 64 bytes of scales over 4 rows, per row
  const std::vector<int32_t> table = {5, 2, 7};
  step(kv, table, 0, 3);  // prefill into block 5
  step(kv, table, 3, 1);  // block 5 full, not yet sealed
  EXPECT_FALSE(region_is(kv, 5, 0, 0, expected_region(s, 0, 0, 0)));
  step(kv, table, 4, 1);  // the first token of block 2 seals block 5, every layer and head
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int64_t g = 0; g < 2; ++g) {
      EXPECT_TRUE(region_is(kv, 5, layer, g, expected_region(s, 0, layer, g)));
    }
  }
  // A prefill that crosses two blocks seals the first in the same step.
  step(kv, table, 5, 5);  // positions 5..9: block 2 (4..7) sealed, block 7 open
  EXPECT_TRUE(region_is(kv, 2, 1, 1, expected_region(s, 4, 1, 1)));
  // The exact rows of the block being written stay readable.
  const PagedKv view = kv.layer_view(1);
  EXPECT_EQ(f16_to_f32(view.k_exact_rows(7, 1)[1 * s.head_dim + 3]),
            f16_to_f32(f32_to_f16(value_at(9, 1, 1, 3))));
  EXPECT_EQ(kv.k_restaged(), 0);
}

TEST(HostKvChannel, ReadBlockSealsAFullBlockNoStepSealedAndWriteBlockRestoresIt) {
  HostKvStorage kv(channel_shape(8));
  const KvShape& s = kv.shape();
  const std::vector<int32_t> table = {3};
  step(kv, table, 0, 4);  // a sequence that ended exactly at the block's end
  std::vector<uint8_t> bytes(static_cast<size_t>(s.bytes_per_block()));
  kv.read_block(3, bytes.data());  // as the offload tiers copy a cached block
  EXPECT_TRUE(region_is(kv, 3, 1, 0, expected_region(s, 0, 1, 0)));
  kv.write_block(6, bytes.data());  // restored elsewhere: sealed as written
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int64_t g = 0; g < 2; ++g) {
      EXPECT_TRUE(region_is(kv, 6, layer, g, expected_region(s, 0, layer, g)));
    }
  }
  // A sequence that continues after the restored prefix does not unseal it.
  const std::vector<int32_t> next = {6, 1};
  step(kv, next, 4, 2);
  EXPECT_TRUE(region_is(kv, 6, 0, 1, expected_region(s, 0, 0, 1)));
}

TEST(HostKvChannel, ExactRowsStayBoundedAndComeBackFromTheSealedCodes) {
  const int64_t n_blocks = 200;
  HostKvStorage kv(channel_shape(n_blocks));
  const KvShape& s = kv.shape();
  // 150 sequences of one partial block each, one step apiece: more than the bound keeps.
  for (int32_t b = 0; b < 150; ++b) step(kv, {b}, 0, 2);
  EXPECT_LE(kv.k_blocks_with_exact_rows(), kv.exact_rows_cap());
  EXPECT_EQ(kv.k_restaged(), 0);
  // Block 0's rows went (written longest ago), sealed as they were; its sequence comes back and
  // reads them from the codes, counted.
  step(kv, {0}, 2, 1);
  EXPECT_EQ(kv.k_restaged(), 1);
  const PagedKv view = kv.layer_view(0);
  float sealed[8];
  kv_channel_read_row(view.k_region(0, 1), 1, s.head_dim, s.block_size, sealed);
  EXPECT_EQ(f16_to_f32(view.k_exact_rows(0, 1)[1 * s.head_dim + 2]),
            f16_to_f32(f32_to_f16(sealed[2])));
  // The blocks of the last two steps always keep theirs.
  EXPECT_NE(view.k_exact[149], nullptr);
  EXPECT_NE(view.k_exact[0], nullptr);
}

TEST(HostKvChannel, ShapesThatCannotBeStoredPerChannelAreRefused) {
  KvShape s = channel_shape(2);
  s.k_dtype = DType::Q8_0;
  EXPECT_THROW(HostKvStorage{s}, Error);
  s = channel_shape(2);
  s.block_size = 1;
  EXPECT_THROW(HostKvStorage{s}, Error);
}

}  // namespace
}  // namespace ember::cpu
