// One sequence's view of the paged KV cache: blocks[i] holds positions [i*block_size,
// (i+1)*block_size), or is -1 once a sliding window has passed it (the block went back to the
// pool; attention never reads positions before its window). `hashes` holds the prefix-cache hash of
// each leading full block that has been registered (hashes.size() <= blocks.size()); KvBlockManager
// maintains both.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

struct KvBlockTable {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
};

}  // namespace ember
