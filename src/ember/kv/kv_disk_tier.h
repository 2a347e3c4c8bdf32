// The disk tier of the KV offload (kv_tier_store.h): one file per prefix block in a directory,
// kept across restarts. A file is named "<model fingerprint>-<block hash>.kvb" (hex) and holds
//   header  magic "EMBERKV1", format version, model fingerprint, block hash, token count,
//           payload bytes, FNV-1a 64 checksum of tokens + payload  (little-endian, 48 bytes)
//   tokens  the block's token ids (int32), a guard against hash collisions
//   payload the block's bytes as the backend wrote them (KvStorage::read_block)
// The fingerprint covers the weights, their dtype, the KV dtype(s) and the block shape, so a
// directory can be shared by models and KV dtypes without one ever reading another's entries.
// Writes go to a temporary name and are renamed into place (a crash leaves no half entry under a
// real name). At startup the directory is indexed (this fingerprint's files, LRU by modification
// time); a corrupt, truncated or foreign file is detected when read, counted, deleted and never
// used. The tier holds at most `capacity` bytes of this fingerprint's files, evicting the least
// recently used. A directory that cannot be written (full, read-only, deleted) turns the tier off
// with one warning: callers go on without it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ember {

struct KvDiskTierStats {
  int64_t entries = 0;         // files of this fingerprint indexed
  int64_t bytes = 0;           // their size on disk
  int64_t rejected = 0;        // files found corrupt, truncated or foreign when read (deleted)
  int64_t write_failures = 0;  // writes that failed (the first one turns the tier off)
  bool disabled = false;       // off after a failure (or a directory that could not be made)
};

class KvDiskTier {
 public:
  KvDiskTier(std::filesystem::path dir, int64_t capacity, uint64_t fingerprint);

  bool enabled() const { return !stats_.disabled; }
  // Writes the entry (replacing one of the same hash). Returns false (and may disable the tier)
  // when it could not be written.
  bool put(uint64_t hash, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  // Reads entry `hash` into `payload` (its size must match) if a valid file with these tokens is
  // there; a file that fails a check is deleted and counted.
  bool get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> payload);
  bool contains(uint64_t hash) const { return index_.count(hash) != 0; }
  const KvDiskTierStats& stats() const { return stats_; }
  // Writes the entries' pages back and drops them from the OS page cache, so the next reads come
  // from the device (benchmarks of the tier).
  void drop_page_cache();
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path_of(uint64_t hash) const;

 private:
  struct Entry {
    uint64_t hash;
    int64_t bytes;
  };
  void index_directory();
  void touch(uint64_t hash);  // most recently used
  void erase(uint64_t hash);
  void disable(const std::string& why);

  std::filesystem::path dir_;
  int64_t capacity_;
  uint64_t fingerprint_;
  std::list<Entry> lru_;  // oldest first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  KvDiskTierStats stats_;
};

// FNV-1a 64 of `bytes`, continuing from `h`.
uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace ember
