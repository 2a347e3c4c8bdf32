#include "ember/kv/kv_tier_store.h"

#include <algorithm>
#include <chrono>

namespace ember {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

KvTierStore::KvTierStore(const KvTierOptions& options, uint64_t fingerprint, int64_t block_bytes)
    : options_(options), block_bytes_(block_bytes) {
  if (!options.disk_dir.empty()) {
    disk_ = std::make_unique<KvDiskTier>(options.disk_dir, options.disk_bytes, fingerprint);
  }
}

void KvTierStore::to_disk(uint64_t hash, std::span<const int32_t> tokens,
                          std::span<const uint8_t> bytes) {
  if (!disk_ || !disk_->enabled() || disk_->contains(hash)) return;
  const auto start = std::chrono::steady_clock::now();
  if (disk_->put(hash, tokens, bytes)) {
    disk_counters_.bytes_written += static_cast<int64_t>(bytes.size());
    disk_counters_.write_seconds += seconds_since(start);
  }
}

void KvTierStore::put(uint64_t hash, std::span<const int32_t> tokens,
                      std::span<const uint8_t> bytes) {
  if (options_.ram_bytes < block_bytes_) {  // no RAM tier (or one too small for a block)
    to_disk(hash, tokens, bytes);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (auto it = ram_index_.find(hash); it != ram_index_.end()) {
    ram_.splice(ram_.end(), ram_, it->second);  // already held: now the most recent
    return;
  }
  while (static_cast<int64_t>(ram_.size() + 1) * block_bytes_ > options_.ram_bytes) {
    RamEntry& old = ram_.front();
    to_disk(old.hash, old.tokens, old.bytes);
    ram_index_.erase(old.hash);
    ram_.pop_front();
  }
  ram_.push_back({hash, {tokens.begin(), tokens.end()}, {bytes.begin(), bytes.end()}});
  ram_index_[hash] = std::prev(ram_.end());
  ram_counters_.bytes_written += static_cast<int64_t>(bytes.size());
  ram_counters_.write_seconds += seconds_since(start);
}

bool KvTierStore::contains(uint64_t hash) {
  if (ram_index_.count(hash) != 0) return true;
  if (options_.ram_bytes >= block_bytes_) ++ram_counters_.misses;
  if (disk_ && disk_->enabled() && disk_->contains(hash)) return true;
  if (disk_ && disk_->enabled()) ++disk_counters_.misses;
  return false;
}

bool KvTierStore::get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> out) {
  auto start = std::chrono::steady_clock::now();
  if (auto it = ram_index_.find(hash); it != ram_index_.end()) {
    const RamEntry& e = *it->second;
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) {
      std::copy(e.bytes.begin(), e.bytes.end(), out.begin());
      ram_.splice(ram_.end(), ram_, it->second);
      ++ram_counters_.hits;
      ram_counters_.bytes_read += static_cast<int64_t>(out.size());
      ram_counters_.read_seconds += seconds_since(start);
      return true;
    }
  }
  if (options_.ram_bytes >= block_bytes_) ++ram_counters_.misses;
  if (!disk_ || !disk_->enabled()) return false;
  start = std::chrono::steady_clock::now();
  if (!disk_->get(hash, tokens, out)) {
    ++disk_counters_.misses;
    return false;
  }
  ++disk_counters_.hits;
  disk_counters_.bytes_read += static_cast<int64_t>(out.size());
  disk_counters_.read_seconds += seconds_since(start);
  return true;
}

void KvTierStore::persist() {
  for (const RamEntry& e : ram_) to_disk(e.hash, e.tokens, e.bytes);
}

void KvTierStore::drop_disk_page_cache() {
  if (disk_) disk_->drop_page_cache();
}

KvTierStats KvTierStore::stats() const {
  KvTierStats s;
  s.ram = ram_counters_;
  s.ram.entries = static_cast<int64_t>(ram_.size());
  s.ram.bytes = s.ram.entries * block_bytes_;
  s.disk = disk_counters_;
  if (disk_) {
    s.disk.entries = disk_->stats().entries;
    s.disk.bytes = disk_->stats().bytes;
    s.disk_rejected = disk_->stats().rejected;
    s.disk_write_failures = disk_->stats().write_failures;
    s.disk_enabled = disk_->enabled();
  }
  return s;
}

}  // namespace ember
