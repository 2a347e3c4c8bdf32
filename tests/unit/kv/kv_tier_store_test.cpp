// The KV offload tiers (kv/kv_tier_store.h, kv/kv_disk_tier.h): the RAM tier's LRU and its spill
// to disk, disk entries that survive a new store (a restart), and every bad file a directory can
// hold — corrupt, truncated, another model's — detected, counted, deleted and never used; a
// bound that evicts the oldest; a directory deleted under a running tier.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "ember/kv/kv_tier_store.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlockBytes = 1000;

struct Block {
  uint64_t hash;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> bytes;
};

Block make_block(uint64_t hash) {
  Block b{hash, std::vector<int32_t>(8), std::vector<uint8_t>(kBlockBytes)};
  std::iota(b.tokens.begin(), b.tokens.end(), static_cast<int32_t>(hash * 10));
  std::mt19937 rng(static_cast<uint32_t>(hash));
  for (uint8_t& v : b.bytes) v = static_cast<uint8_t>(rng());
  return b;
}

// A fresh scratch directory (test_util.h) for the tier, not yet created.
struct TempDir {
  fs::path path =
      test::scratch_dir(std::string("kv-tier-") +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name()) /
      "tier";
};

bool get(KvTierStore& store, const Block& b) {
  std::vector<uint8_t> out(kBlockBytes);
  if (!store.get(b.hash, b.tokens, out)) return false;
  EXPECT_EQ(out, b.bytes);
  return true;
}

TEST(KvTierStore, RamTierIsAnLruThatSpillsToDisk) {
  TempDir dir;
  KvTierOptions o;
  o.ram_bytes = 3 * kBlockBytes;
  o.disk_dir = dir.path.string();
  KvTierStore store(o, 42, kBlockBytes);
  std::vector<Block> blocks;
  for (uint64_t h = 1; h <= 4; ++h) blocks.push_back(make_block(h));
  for (int i = 0; i < 3; ++i) store.put(blocks[i].hash, blocks[i].tokens, blocks[i].bytes);
  EXPECT_TRUE(get(store, blocks[0]));  // block 1 is now the most recent; 2 is the oldest
  store.put(blocks[3].hash, blocks[3].tokens, blocks[3].bytes);
  KvTierStats s = store.stats();
  EXPECT_EQ(s.ram.entries, 3);
  EXPECT_EQ(s.disk.entries, 1);  // block 2 fell to disk
  EXPECT_TRUE(fs::exists(dir.path / "000000000000002a-0000000000000002.kvb"));
  for (const Block& b : blocks) EXPECT_TRUE(get(store, b)) << b.hash;
  s = store.stats();
  EXPECT_EQ(s.ram.hits, 4);  // blocks 1, 1, 3, 4
  EXPECT_EQ(s.disk.hits, 1);
  EXPECT_EQ(s.disk.bytes_read, kBlockBytes);
  // Same hash, other tokens (a collision): a miss in both tiers.
  Block other = blocks[0];
  other.tokens[3] += 1;
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_FALSE(store.get(other.hash, other.tokens, out));
}

TEST(KvTierStore, DiskEntriesSurviveARestartAndOtherModelsNeverSeeThem) {
  TempDir dir;
  KvTierOptions o;
  o.ram_bytes = 10 * kBlockBytes;
  o.disk_dir = dir.path.string();
  const Block a = make_block(7), b = make_block(8);
  {
    KvTierStore store(o, 42, kBlockBytes);
    store.put(a.hash, a.tokens, a.bytes);
    store.put(b.hash, b.tokens, b.bytes);
    EXPECT_EQ(store.stats().disk.entries, 0);  // still in RAM
    store.persist();                           // shutdown
    EXPECT_EQ(store.stats().disk.entries, 2);
  }
  KvTierStore restarted(o, 42, kBlockBytes);
  EXPECT_EQ(restarted.stats().disk.entries, 2);
  EXPECT_TRUE(get(restarted, a));
  EXPECT_TRUE(get(restarted, b));
  KvTierStore other_model(o, 43, kBlockBytes);
  EXPECT_EQ(other_model.stats().disk.entries, 0);
  EXPECT_FALSE(get(other_model, a));
}

// Bad files: each is detected when read, counted, deleted, and the lookup is a miss.
TEST(KvTierStore, CorruptTruncatedAndForeignFilesAreNeverUsed) {
  TempDir dir;
  const std::vector<Block> blocks = {make_block(1), make_block(2), make_block(3)};
  KvDiskTier writer(dir.path, 1 << 20, 42);
  for (const Block& b : blocks) ASSERT_TRUE(writer.put(b.hash, b.tokens, b.bytes));
  // 1: a flipped payload byte.
  {
    std::fstream f(writer.path_of(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(48 + 8 * 4 + 500);
    f.put('\x5a' ^ static_cast<char>(blocks[0].bytes[500]));
  }
  // 2: truncated.
  fs::resize_file(writer.path_of(2), 48 + 8 * 4 + 10);
  // 3: another model's entry under this model's name.
  {
    KvDiskTier foreign(dir.path / "other", 1 << 20, 99);
    ASSERT_TRUE(foreign.put(3, blocks[2].tokens, blocks[2].bytes));
    fs::copy_file(foreign.path_of(3), writer.path_of(3), fs::copy_options::overwrite_existing);
  }
  KvDiskTier reader(dir.path, 1 << 20, 42);  // a restart indexes all three
  EXPECT_EQ(reader.stats().entries, 3);
  for (const Block& b : blocks) {
    std::vector<uint8_t> out(kBlockBytes);
    EXPECT_FALSE(reader.get(b.hash, b.tokens, out)) << b.hash;
    EXPECT_FALSE(fs::exists(reader.path_of(b.hash))) << b.hash;
  }
  EXPECT_EQ(reader.stats().rejected, 3);
  EXPECT_EQ(reader.stats().entries, 0);
  EXPECT_TRUE(reader.enabled());
  // The tier still works after them.
  ASSERT_TRUE(reader.put(blocks[0].hash, blocks[0].tokens, blocks[0].bytes));
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(reader.get(blocks[0].hash, blocks[0].tokens, out));
  EXPECT_EQ(out, blocks[0].bytes);
}

// A small quota: the tier holds at most its bound, evicting the least recently used file.
TEST(KvTierStore, DiskBoundEvictsTheOldest) {
  TempDir dir;
  const int64_t file_bytes = 48 + 8 * 4 + kBlockBytes;
  KvDiskTier tier(dir.path, 2 * file_bytes + file_bytes / 2, 42);
  const std::vector<Block> blocks = {make_block(1), make_block(2), make_block(3)};
  for (const Block& b : blocks) ASSERT_TRUE(tier.put(b.hash, b.tokens, b.bytes));
  EXPECT_EQ(tier.stats().entries, 2);
  EXPECT_LE(tier.stats().bytes, 2 * file_bytes + file_bytes / 2);
  EXPECT_FALSE(fs::exists(tier.path_of(1)));
  EXPECT_TRUE(fs::exists(tier.path_of(3)));
  int64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(dir.path))
    on_disk += static_cast<int64_t>(e.file_size());
  EXPECT_EQ(on_disk, tier.stats().bytes);
  KvDiskTier too_small(dir.path / "tiny", 100, 42);  // not even one entry fits: nothing written
  EXPECT_FALSE(too_small.put(1, blocks[0].tokens, blocks[0].bytes));
  EXPECT_TRUE(too_small.enabled());
}

// The directory disappears while the tier runs: the next write fails, the tier turns itself off
// (one warning), and lookups miss instead of failing; the RAM tier goes on.
TEST(KvTierStore, DeletedDirectoryTurnsTheDiskTierOff) {
  TempDir dir;
  KvTierOptions o;
  o.ram_bytes = kBlockBytes;
  o.disk_dir = dir.path.string();
  KvTierStore store(o, 42, kBlockBytes);
  const Block a = make_block(1), b = make_block(2), c = make_block(3);
  store.put(a.hash, a.tokens, a.bytes);
  fs::remove_all(dir.path);
  store.put(b.hash, b.tokens, b.bytes);  // pushes a to the missing directory
  KvTierStats s = store.stats();
  EXPECT_FALSE(s.disk_enabled);
  EXPECT_EQ(s.disk_write_failures, 1);
  EXPECT_FALSE(get(store, a));
  EXPECT_TRUE(get(store, b));
  store.put(c.hash, c.tokens, c.bytes);
  EXPECT_TRUE(get(store, c));
  EXPECT_EQ(store.stats().disk_write_failures, 1);  // off: no further attempts
}

}  // namespace
}  // namespace ember
