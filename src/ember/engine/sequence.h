// A sequence flowing through the engine: its tokens so far and its block table in the paged KV
// cache. n_cached tokens (a prefix of `tokens`) already have their K/V in the cache.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/kv/kv_block_table.h"

namespace ember {

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;
  int64_t n_cached = 0;
  KvBlockTable block_table;
};

}  // namespace ember
