// KV offload tiers below the backend's pool: host RAM, then disk. A prefix block that leaves the
// pool (its cached copy evicted to make room, including after a preemption) is kept here under its
// prefix hash, and a later prompt that starts with the same tokens gets it copied back instead of
// recomputed (KvBlockManager asks through KvBlockSpill; kv_tier_spill.h connects the two).
//   RAM   --kv-offload-ram SIZE: an LRU of block copies; what falls out of it goes to disk.
//   disk  --kv-offload-dir DIR [--kv-offload-disk SIZE]: kv_disk_tier.h; survives restarts (the
//         engine spills its cached blocks and the RAM tier to disk when it shuts down).
// Entries are keyed by the block's hash plus the model fingerprint (weights, dtypes, KV shape)
// and carry the block's tokens; a lookup checks both.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/kv/kv_disk_tier.h"

namespace ember {

struct KvTierOptions {
  int64_t ram_bytes = 0;  // 0: no RAM tier
  std::string disk_dir;   // empty: no disk tier
  int64_t disk_bytes = int64_t{10} << 30;
  bool enabled() const { return ram_bytes > 0 || !disk_dir.empty(); }
};

// Per tier: what lookups found, what moved and how long it took.
struct KvTierCounters {
  int64_t hits = 0, misses = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  double read_seconds = 0, write_seconds = 0;
  int64_t entries = 0, bytes = 0;  // held now
};

struct KvTierStats {
  KvTierCounters ram, disk;
  int64_t disk_rejected = 0;  // corrupt, truncated or foreign files found (and deleted)
  int64_t disk_write_failures = 0;
  bool disk_enabled = false;
};

class KvTierStore {
 public:
  // block_bytes: the size of every entry's payload (KvShape::bytes_per_block()).
  KvTierStore(const KvTierOptions& options, uint64_t fingerprint, int64_t block_bytes);

  // Keeps a block's bytes: into RAM (pushing the least recently used there down to disk), or to
  // disk when there is no RAM tier.
  void put(uint64_t hash, std::span<const int32_t> tokens, std::span<const uint8_t> bytes);
  // Whether RAM or disk holds an entry for `hash` (a lookup: absence counts as a miss of each
  // tier).
  bool contains(uint64_t hash);
  // Copies the block back into `out` (block_bytes), from RAM, else from disk.
  bool get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> out);
  // Writes every RAM entry to disk (shutdown: what a restart should find).
  void persist();
  void drop_disk_page_cache();
  KvTierStats stats() const;
  int64_t block_bytes() const { return block_bytes_; }

 private:
  struct RamEntry {
    uint64_t hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> bytes;
  };
  void to_disk(uint64_t hash, std::span<const int32_t> tokens, std::span<const uint8_t> bytes);

  KvTierOptions options_;
  int64_t block_bytes_;
  std::list<RamEntry> ram_;  // oldest first
  std::unordered_map<uint64_t, std::list<RamEntry>::iterator> ram_index_;
  std::unique_ptr<KvDiskTier> disk_;
  KvTierCounters ram_counters_, disk_counters_;
};

}  // namespace ember
