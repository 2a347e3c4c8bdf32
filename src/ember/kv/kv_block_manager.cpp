#include "ember/kv/kv_block_manager.h"

#include <algorithm>
#include <string>

#include "ember/core/error.h"

namespace ember {

KvBlockManager::KvBlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching)
    : n_blocks_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  if (n_blocks <= 0 || block_size <= 0) throw Error("KV cache: invalid pool shape");
  size_t n = static_cast<size_t>(n_blocks);
  ref_counts_.assign(n, 0);
  generations_.assign(n, 0);
  versions_.assign(n, 0);
  block_hash_of_.assign(n, 0);
  lru_pos_.resize(n);
  in_lru_.assign(n, false);
  free_list_.reserve(n);
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

int64_t KvBlockManager::available_blocks() const {
  return static_cast<int64_t>(free_list_.size() + lru_.size());
}

uint64_t KvBlockManager::block_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  // 64-bit mix of the parent hash and the token ids (splitmix finaliser per step); 0 is reserved.
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9E3779B97F4A7C15ull + (h << 6) +
         (h >> 2);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;
}

int32_t KvBlockManager::take_block() {
  int32_t block;
  if (!free_list_.empty()) {
    block = free_list_.back();
    free_list_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();  // evict the least recently used cached block
    evict(block);
  } else {
    return -1;
  }
  ref_counts_[block] = 1;
  ++generations_[block];
  ++versions_[block];
  return block;
}

void KvBlockManager::evict(int32_t block) {
  lru_.erase(lru_pos_[block]);
  in_lru_[block] = false;
  auto it = cache_.find(block_hash_of_[block]);
  if (spill_ != nullptr && it != cache_.end()) {
    spill_->spill(block, it->first, it->second.tokens);
    ++stats_.spilled_blocks;
  }
  cache_.erase(it);
  block_hash_of_[block] = 0;
}

void KvBlockManager::spill_cached() {
  while (!lru_.empty()) {
    const int32_t block = lru_.front();
    evict(block);
    free_list_.push_back(block);
  }
}

int32_t KvBlockManager::restore(uint64_t hash, std::span<const int32_t> tokens) {
  if (spill_ == nullptr || cache_.count(hash) != 0) return -1;  // a colliding pool entry wins
  if (!spill_->has(hash)) return -1;
  const int32_t block = take_block();
  if (block < 0) return -1;
  if (!spill_->restore(block, hash, tokens)) {
    ref_counts_[block] = 0;
    free_list_.push_back(block);
    return -1;
  }
  block_hash_of_[block] = hash;
  cache_.emplace(hash, CachedBlock{block, {tokens.begin(), tokens.end()}});
  ++stats_.restored_blocks;
  return block;
}

void KvBlockManager::retain(int32_t block) {
  if (ref_counts_[block] == 0 && in_lru_[block]) {
    lru_.erase(lru_pos_[block]);
    in_lru_[block] = false;
  }
  ++ref_counts_[block];
}

void KvBlockManager::drop(int32_t block) {
  if (ref_counts_.at(block) <= 0) {
    throw Error("KV cache: release of free block " + std::to_string(block));
  }
  if (--ref_counts_[block] > 0) return;
  if (block_hash_of_[block] != 0) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);  // most recently used at the back
    in_lru_[block] = true;
  } else {
    free_list_.push_back(block);
  }
}

int64_t KvBlockManager::match_prefix(KvBlockTable& table, std::span<const int32_t> tokens) {
  if (!table.blocks.empty()) throw Error("KV cache: match_prefix needs an empty block table");
  if (!prefix_caching_ || tokens.empty()) return 0;
  const int64_t bs = block_size();
  // Full blocks strictly before the one holding the last token.
  const int64_t candidates = (static_cast<int64_t>(tokens.size()) - 1) / bs;
  uint64_t parent = 0;
  for (int64_t i = 0; i < candidates; ++i) {
    ++stats_.queried_blocks;
    auto block_tokens = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    uint64_t h = block_hash(parent, block_tokens);
    auto it = cache_.find(h);
    int32_t block = -1;
    if (it != cache_.end() &&
        std::equal(block_tokens.begin(), block_tokens.end(), it->second.tokens.begin())) {
      block = it->second.block;
      retain(block);
    } else {
      block = restore(h, block_tokens);  // already counted once for the table
    }
    if (block < 0) {
      stats_.queried_blocks += candidates - i - 1;  // the rest cannot hit once the chain breaks
      break;
    }
    ++stats_.hit_blocks;
    table.blocks.push_back(block);
    table.hashes.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(table.blocks.size()) * bs;
}

int64_t KvBlockManager::match_window(KvBlockTable& table, std::span<const int32_t> tokens,
                                     int64_t limit, int64_t window) {
  if (!table.blocks.empty()) throw Error("KV cache: match_window needs an empty block table");
  const int64_t bs = block_size();
  const int64_t n = std::min<int64_t>(limit, static_cast<int64_t>(tokens.size())) / bs;
  if (!prefix_caching_ || n <= 0) return 0;
  std::vector<uint64_t> hashes;
  std::vector<int32_t> found;  // the cached block of each full block of tokens, or -1
  uint64_t parent = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto block_tokens = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    const uint64_t h = block_hash(parent, block_tokens);
    auto it = cache_.find(h);
    const bool hit = it != cache_.end() && std::equal(block_tokens.begin(), block_tokens.end(),
                                                      it->second.tokens.begin());
    hashes.push_back(h);
    found.push_back(hit ? it->second.block : -1);
    parent = h;
  }
  // A token at position m * bs attends from m * bs - window + 1 on.
  const auto first_needed = [&](int64_t m) {
    return std::max<int64_t>(0, m * bs - window + 1) / bs;
  };
  int64_t m = n;
  for (; m > 0; --m) {
    const auto begin = found.begin() + first_needed(m);
    if (std::all_of(begin, found.begin() + m, [](int32_t b) { return b >= 0; })) break;
  }
  if (m == 0) return 0;
  for (int64_t i = 0; i < m; ++i) {
    const int32_t block = i < first_needed(m) ? -1 : found[static_cast<size_t>(i)];
    if (block >= 0) retain(block);
    table.blocks.push_back(block);
    table.hashes.push_back(hashes[static_cast<size_t>(i)]);
  }
  return m * bs;
}

int64_t KvBlockManager::blocks_needed(const KvBlockTable& table, int64_t n_tokens) const {
  int64_t needed = (n_tokens + block_size() - 1) / block_size();
  return std::max<int64_t>(0, needed - static_cast<int64_t>(table.blocks.size()));
}

bool KvBlockManager::reserve(KvBlockTable& table, int64_t n_tokens) {
  int64_t missing = blocks_needed(table, n_tokens);
  if (missing > available_blocks()) return false;
  for (int64_t i = 0; i < missing; ++i) table.blocks.push_back(take_block());
  return true;
}

void KvBlockManager::commit(KvBlockTable& table, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return;
  const int64_t bs = block_size();
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / bs,
                                         static_cast<int64_t>(table.blocks.size()));
  for (int64_t i = static_cast<int64_t>(table.hashes.size()); i < full; ++i) {
    uint64_t parent = i == 0 ? 0 : table.hashes[static_cast<size_t>(i - 1)];
    auto block_tokens = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    uint64_t h = block_hash(parent, block_tokens);
    table.hashes.push_back(h);
    int32_t block = table.blocks[static_cast<size_t>(i)];
    // Another sequence may have cached the same content first: keep theirs, ours stays private.
    if (block_hash_of_[block] == 0 && cache_.find(h) == cache_.end()) {
      block_hash_of_[block] = h;
      cache_.emplace(h, CachedBlock{block, {block_tokens.begin(), block_tokens.end()}});
    }
  }
}

void KvBlockManager::release(KvBlockTable& table) {
  // Later blocks first, so within one sequence the LRU evicts a prefix's tail before its head.
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    if (*it >= 0) drop(*it);
  }
  table.blocks.clear();
  table.hashes.clear();
}

void KvBlockManager::release_before(KvBlockTable& table, int64_t first_kept) {
  const int64_t n =
      std::min<int64_t>(first_kept / block_size(), static_cast<int64_t>(table.blocks.size()));
  for (int64_t i = 0; i < n; ++i) {
    int32_t& block = table.blocks[static_cast<size_t>(i)];
    if (block >= 0) drop(block);
    block = -1;
  }
}

bool KvBlockManager::has_released_blocks(const KvBlockTable& table) {
  return std::find(table.blocks.begin(), table.blocks.end(), -1) != table.blocks.end();
}

bool KvBlockManager::holds_positions(const KvBlockTable& table, int64_t begin, int64_t end) const {
  if (end <= begin) return true;
  const int64_t last = (end - 1) / block_size();
  if (last >= static_cast<int64_t>(table.blocks.size())) return false;
  for (int64_t i = std::max<int64_t>(0, begin) / block_size(); i <= last; ++i) {
    if (table.blocks[static_cast<size_t>(i)] < 0) return false;
  }
  return true;
}

void KvBlockManager::truncate(KvBlockTable& table, int64_t n_tokens) {
  const size_t keep = static_cast<size_t>((n_tokens + block_size() - 1) / block_size());
  while (table.blocks.size() > keep) {
    if (table.blocks.back() >= 0) drop(table.blocks.back());
    table.blocks.pop_back();
  }
  // Only blocks that are still completely valid keep their hash in this table.
  const size_t full = static_cast<size_t>(n_tokens / block_size());
  const bool unhashed = table.hashes.size() > full;
  table.hashes.resize(std::min(table.hashes.size(), full));
  // A kept partial block will be rewritten past n_tokens: it must leave the prefix cache.
  if (table.blocks.size() > full) {
    int32_t last = table.blocks.back();
    if (unhashed && last >= 0) ++versions_[last];
    if (block_hash_of_[last] != 0) {
      if (ref_counts_[last] > 1) {
        throw Error("KV cache: cannot truncate inside a block shared with another sequence");
      }
      cache_.erase(block_hash_of_[last]);
      block_hash_of_[last] = 0;
    }
  }
}

}  // namespace ember
