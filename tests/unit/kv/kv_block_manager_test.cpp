#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <span>
#include <vector>

#include "ember/core/error.h"
#include "ember/kv/kv_block_manager.h"

namespace ember {
namespace {

// A manager of `blocks` blocks of 4 tokens.
KvBlockManager small_manager(int64_t blocks, bool prefix_caching) {
  return KvBlockManager(blocks, /*block_size=*/4, prefix_caching);
}

std::vector<int32_t> iota_tokens(int n, int start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvBlockManager, ReserveGrowsByBlocksAndReleaseReturnsEverything) {
  KvBlockManager kv = small_manager(4, false);
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

// A block's generation counts the times it was handed out for new contents: not when a sequence
// shares it from the prefix cache (its contents stay), but when it is taken again after being
// freed or evicted (a draft's K/V written there before are not there any more).
TEST(KvBlockManager, GenerationCountsNewContentsOnly) {
  KvBlockManager kv = small_manager(2, true);
  const std::vector<int32_t> tokens = iota_tokens(9);  // two full blocks and the last token
  KvBlockTable a;
  ASSERT_TRUE(kv.reserve(a, 9 - 1));
  kv.commit(a, std::span<const int32_t>(tokens).first(8));
  const int32_t first = a.blocks[0];
  const uint32_t generation = kv.generation(first);
  kv.release(a);  // cached, count 0
  KvBlockTable b;
  EXPECT_EQ(kv.match_prefix(b, tokens), 8);
  EXPECT_EQ(b.blocks[0], first);
  EXPECT_EQ(kv.generation(first), generation);  // shared again, same contents
  kv.release(b);
  KvBlockTable c;
  ASSERT_TRUE(kv.reserve(c, 8));  // takes both blocks again (evicting the cached ones)
  EXPECT_NE(std::find(c.blocks.begin(), c.blocks.end(), first), c.blocks.end());
  EXPECT_EQ(kv.generation(first), generation + 1);
  kv.release(c);
}

// A block's contents version changes with its generation and also when a table is cut inside it
// while it is cached (its later positions get rewritten): a draft's K/V of its old positions are
// then nobody's to share.
TEST(KvBlockManager, ContentsVersionChangesWhenACachedBlockIsCutInto) {
  KvBlockManager kv = small_manager(2, true);
  const std::vector<int32_t> tokens = iota_tokens(9);
  KvBlockTable a;
  ASSERT_TRUE(kv.reserve(a, 8));
  kv.commit(a, std::span<const int32_t>(tokens).first(8));
  const int32_t second = a.blocks[1];
  const uint32_t version = kv.contents_version(second), generation = kv.generation(second);
  kv.truncate(a, 8);  // at a block boundary: nothing cut
  EXPECT_EQ(kv.contents_version(second), version);
  kv.truncate(a, 6);  // inside the second block, which leaves the prefix cache
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(kv.contents_version(second), version + 1);
  EXPECT_EQ(kv.generation(second), generation);  // still this table's block
  kv.truncate(a, 5);                             // cut again, no longer cached: no change
  EXPECT_EQ(kv.contents_version(second), version + 1);
  kv.release(a);
}

TEST(KvBlockManager, PrefixBlocksAreSharedAndCountedOnce) {
  KvBlockManager kv = small_manager(8, true);
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
  KvBlockManager kv = small_manager(8, true);
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
  KvBlockManager kv = small_manager(4, true);
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

// A spill that remembers which hashes it holds (no bytes: the manager only keeps books).
struct FakeSpill : KvBlockSpill {
  std::vector<uint64_t> held;
  int spills = 0, restores = 0;
  void spill(int32_t, uint64_t hash, std::span<const int32_t>) override {
    held.push_back(hash);
    ++spills;
  }
  bool has(uint64_t hash) override {
    return std::find(held.begin(), held.end(), hash) != held.end();
  }
  bool restore(int32_t, uint64_t hash, std::span<const int32_t>) override {
    ++restores;
    return has(hash);
  }
};

// Offload hooks: evicted cached blocks are spilled; a prefix whose blocks left the pool is restored
// through the spill (counted as hits); a lookup the tiers cannot answer evicts nothing.
TEST(KvBlockManager, SpilledBlocksAreRestoredAndMissesEvictNothing) {
  KvBlockManager kv = small_manager(3, true);
  FakeSpill spill;
  kv.set_spill(&spill);
  auto first = iota_tokens(9, 0), second = iota_tokens(9, 500), third = iota_tokens(9, 900);
  KvBlockTable a, b, c;
  ASSERT_TRUE(kv.reserve(a, 9));
  kv.commit(a, first);
  kv.release(a);                            // 2 cached blocks + 1 free
  EXPECT_EQ(kv.match_prefix(c, third), 0);  // not in the pool, not in the tier
  EXPECT_EQ(spill.spills, 0);               // ... and nothing was evicted to look
  EXPECT_EQ(spill.restores, 0);
  EXPECT_EQ(kv.cached_blocks(), 2);
  ASSERT_TRUE(kv.reserve(b, 9));  // needs all 3 blocks: both cached ones are spilled
  kv.commit(b, second);
  EXPECT_EQ(spill.spills, 2);
  EXPECT_EQ(kv.stats().spilled_blocks, 2);
  kv.release(b);
  KvBlockTable d;
  EXPECT_EQ(kv.match_prefix(d, first), 8);  // both of first's blocks come back from the tier
  EXPECT_EQ(kv.stats().restored_blocks, 2);
  kv.release(d);
  kv.spill_cached();  // shutdown: every cached block leaves the pool through the spill
  EXPECT_EQ(kv.cached_blocks(), 0);
  EXPECT_EQ(kv.used_blocks(), 0);
}

TEST(KvBlockManager, DoubleReleaseIsAnError) {
  KvBlockManager kv = small_manager(2, false);
  KvBlockTable a;
  ASSERT_TRUE(kv.reserve(a, 1));
  KvBlockTable copy = a;
  kv.release(a);
  EXPECT_THROW(kv.release(copy), std::runtime_error);
}

// A sliding-window layers' pool (backend/kv_cache.h): a sequence gave back the blocks its window
// passed, some of which were then reused. A new sequence with the same tokens attaches only the
// blocks the last window needs, at the longest cut where all of them are still cached.
TEST(KvBlockManager, WindowMatchAttachesOnlyTheBlocksTheWindowNeeds) {
  KvBlockManager kv = small_manager(8, true);
  const std::vector<int32_t> tokens = iota_tokens(30);
  KvBlockTable first;
  ASSERT_TRUE(kv.reserve(first, 24));
  kv.commit(first, std::span<const int32_t>(tokens).first(24));
  // A window of 6: a token at 24 attends from 19 on, so blocks 0..3 (positions 0..15) go back.
  kv.release_before(first, 24 - 6 + 1);
  EXPECT_TRUE(KvBlockManager::has_released_blocks(first));
  EXPECT_TRUE(kv.holds_positions(first, 19, 24));
  EXPECT_FALSE(kv.holds_positions(first, 15, 24));
  EXPECT_FALSE(kv.holds_positions(first, 19, 25));  // block 6 is not reserved
  kv.release(first);
  // Its 6 blocks are cached (hashed, count 0). Another table takes the 2 never-used blocks and
  // then the LRU's oldest two: the sequence's blocks 0 and 1, given back first.
  KvBlockTable other;
  ASSERT_TRUE(kv.reserve(other, 4 * 4));
  EXPECT_EQ(kv.cached_blocks(), 4);

  KvBlockTable table;
  const int64_t cut = kv.match_window(table, tokens, 24, 6);
  // Cut 24 needs blocks 4 and 5 (positions 19..23): both cached.
  EXPECT_EQ(cut, 24);
  ASSERT_EQ(table.blocks.size(), 6u);
  EXPECT_EQ(table.hashes.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(table.blocks[static_cast<size_t>(i)], -1);
  EXPECT_GE(table.blocks[4], 0);
  EXPECT_GE(table.blocks[5], 0);
  EXPECT_EQ(kv.ref_count(table.blocks[5]), 1);
  // A cut whose window reaches a block no longer cached falls back to a shorter one, or none.
  KvBlockTable none;
  EXPECT_EQ(kv.match_window(none, tokens, 24, 24), 0);
  EXPECT_TRUE(none.blocks.empty());
  kv.release(table);
  kv.release(other);
  EXPECT_EQ(kv.used_blocks(), 0);
}

}  // namespace
}  // namespace ember
