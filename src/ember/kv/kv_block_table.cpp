#include "ember/kv/kv_block_table.h"

namespace ember {

bool KvBlockTable::reserve(KvBlockPool& pool, int64_t n_tokens) {
  int64_t needed = (n_tokens + pool.block_size() - 1) / pool.block_size();
  int64_t missing = needed - static_cast<int64_t>(blocks_.size());
  if (missing <= 0) return true;
  if (missing > pool.free_blocks()) return false;
  for (int64_t i = 0; i < missing; ++i) blocks_.push_back(pool.allocate());
  return true;
}

void KvBlockTable::release(KvBlockPool& pool) {
  for (int32_t b : blocks_) pool.release(b);
  blocks_.clear();
}

}  // namespace ember
