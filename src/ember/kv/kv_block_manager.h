// Keeps the books of the KV cache's blocks: reference counts, the free list and the prefix cache.
// Bookkeeping only: the bytes live in the backend's KvStorage, indexed by the block ids kept here.
//
// Prefix caching (vLLM's automatic prefix caching): a full block is identified by
// hash(parent block's hash, its block_size token ids). When a sequence starts, every leading full
// block of its tokens whose hash is cached is shared (reference count + 1) instead of recomputed.
// A block whose count drops to zero keeps its contents and hash and waits in an LRU list; it is
// handed out again only when no never-used/uncached block is left, and then loses its hash.
//
// Offload tiers (kv_tier_store.h): with a KvBlockSpill attached, a cached block about to be handed
// out again is first spilled (its bytes kept by a lower tier under its hash), and a prefix lookup
// whose chain breaks in the pool asks the spill to restore the next blocks into fresh ones before
// giving up, so a prefix that left the pool is copied back instead of recomputed.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "ember/kv/kv_block_table.h"

namespace ember {

struct PrefixCacheStats {
  int64_t queried_blocks = 0;   // full prompt blocks looked up
  int64_t hit_blocks = 0;       // of which were found cached (in the pool or restored)
  int64_t restored_blocks = 0;  // of the hits, copied back from an offload tier
  int64_t spilled_blocks = 0;   // cached blocks handed to an offload tier as they left the pool
};

// Where cached blocks go when they leave the pool and come back from (the engine's offload tiers).
class KvBlockSpill {
 public:
  virtual ~KvBlockSpill() = default;
  // `block` holds the prefix block `hash` (its own tokens: `tokens`) and is about to be reused:
  // keep its bytes.
  virtual void spill(int32_t block, uint64_t hash, std::span<const int32_t> tokens) = 0;
  // Whether a tier holds prefix block `hash` (asked before a block is taken for it, so a miss costs
  // no eviction).
  virtual bool has(uint64_t hash) = 0;
  // Fills `block` with the bytes kept for prefix block `hash` with these tokens; false if no tier
  // has them (the block is then untouched).
  virtual bool restore(int32_t block, uint64_t hash, std::span<const int32_t> tokens) = 0;
};

class KvBlockManager {
 public:
  KvBlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching);

  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Attaches the offload tiers (null: none). The spill must outlive the manager's use of it.
  void set_spill(KvBlockSpill* spill) { spill_ = spill; }
  // Spills every cached block no sequence holds (to the tiers, if attached) and frees it: the
  // pool keeps only blocks in use. For shutdown (the disk tier outlives the process) and for
  // measuring a restore.
  void spill_cached();

  // For a sequence with an empty table: attaches every cached leading full block of `tokens`,
  // never the block holding the last token (its logits must be computed). Returns the number of
  // tokens whose K/V is now already in the cache (a multiple of block_size).
  int64_t match_prefix(KvBlockTable& table, std::span<const int32_t> tokens);
  // The same for the pool of a model's sliding-window layers (kv_cache.h), whose blocks behind
  // each window were given back: attaches the cached blocks covering the last `window` - 1
  // positions before the longest cut <= `limit` (a multiple of block_size) where all of them are
  // cached, -1 entries before them. Returns that cut (0: none).
  int64_t match_window(KvBlockTable& table, std::span<const int32_t> tokens, int64_t limit,
                       int64_t window);
  // Makes the table cover `n_tokens` positions. Returns false, taking nothing, when too few
  // blocks can be had (free or evictable).
  bool reserve(KvBlockTable& table, int64_t n_tokens);
  // Blocks needed to grow `table` to `n_tokens` positions.
  int64_t blocks_needed(const KvBlockTable& table, int64_t n_tokens) const;
  // After the K/V of tokens [0, tokens.size()) is in the cache: registers the newly completed
  // full blocks in the prefix cache.
  void commit(KvBlockTable& table, std::span<const int32_t> tokens);
  // Drops the table's references; blocks that reach zero become free (or cached, if hashed).
  void release(KvBlockTable& table);
  // Sliding window: gives back the blocks wholly before position `first_kept` (no later token
  // attends to them). Their table entries become -1; the table keeps its length and hashes.
  void release_before(KvBlockTable& table, int64_t first_kept);
  // Whether release_before() took any of the table's blocks.
  static bool has_released_blocks(const KvBlockTable& table);
  // Whether the table still holds the blocks of positions [begin, end) (none released).
  bool holds_positions(const KvBlockTable& table, int64_t begin, int64_t end) const;
  // Keeps only the blocks covering positions [0, n_tokens); the rest are released. A kept
  // partial block is forgotten by the prefix cache's chain of this table (it will be rewritten).
  void truncate(KvBlockTable& table, int64_t n_tokens);

  int64_t n_blocks() const { return n_blocks_; }
  // Blocks a new allocation can take: never-used + evictable cached ones.
  int64_t available_blocks() const;
  int64_t cached_blocks() const { return static_cast<int64_t>(lru_.size()); }
  int64_t used_blocks() const { return n_blocks() - available_blocks(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }
  // Counts the times `block` was handed out for new contents (a fresh or evicted block taken, a
  // prefix restored into it): a holder of K/V of its own in the pool's blocks (a draft model's,
  // draft_proposer.h) knows by it whether the block still holds what it wrote.
  uint32_t generation(int32_t block) const { return generations_.at(block); }
  // Counts the changes of what a cached block holds: its generation's changes, and a truncation
  // inside it that takes it out of the prefix cache (its positions past the cut get rewritten,
  // perhaps with other tokens). Unchanged, a block registered in a table's hashes still holds the
  // positions it held then.
  uint32_t contents_version(int32_t block) const { return versions_.at(block); }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct CachedBlock {
    int32_t block;
    std::vector<int32_t> tokens;  // guards against hash collisions
  };

  int32_t take_block();  // a free block, else the least recently used cached one; -1 if none
  // Forgets cached block `block` (count 0, in the LRU), spilling it first.
  void evict(int32_t block);
  // Restores prefix block `hash` from a tier into a fresh block: the block, or -1.
  int32_t restore(uint64_t hash, std::span<const int32_t> tokens);
  void retain(int32_t block);
  void drop(int32_t block);
  uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) const;

  int64_t n_blocks_;
  int64_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_counts_;
  std::vector<uint32_t> generations_;
  std::vector<uint32_t> versions_;
  std::vector<int32_t> free_list_;                   // never hashed, count 0 (LIFO)
  std::vector<uint64_t> block_hash_of_;              // 0 = not in the cache
  std::unordered_map<uint64_t, CachedBlock> cache_;  // hash -> block
  std::list<int32_t> lru_;                           // cached blocks with count 0, oldest first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  PrefixCacheStats stats_;
  KvBlockSpill* spill_ = nullptr;
};

}  // namespace ember
