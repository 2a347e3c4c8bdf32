// One sequence's view of the paged KV cache: block i holds positions [i*block_size,
// (i+1)*block_size). Growing it takes blocks from the pool; releasing it returns them all.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/kv/kv_block_pool.h"

namespace ember {

class KvBlockTable {
 public:
  KvBlockTable() = default;
  ~KvBlockTable() = default;
  KvBlockTable(const KvBlockTable&) = delete;
  KvBlockTable& operator=(const KvBlockTable&) = delete;
  KvBlockTable(KvBlockTable&&) = default;
  KvBlockTable& operator=(KvBlockTable&&) = default;

  // Makes room for `n_tokens` positions, allocating blocks as needed. Returns false (and
  // allocates nothing) when the pool has too few free blocks.
  bool reserve(KvBlockPool& pool, int64_t n_tokens);
  // Returns every block to the pool.
  void release(KvBlockPool& pool);

  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t capacity(const KvBlockPool& pool) const {
    return static_cast<int64_t>(blocks_.size()) * pool.block_size();
  }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace ember
