// Connects the block manager's spill hook (KvBlockSpill) to a backend's KV storage and the offload
// tiers: a block leaving the pool is read out of the storage into the tiers; a restored one is
// written back into its new block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/kv/kv_block_manager.h"
#include "ember/kv/kv_tier_store.h"

namespace ember {

// The key a model's offload entries are filed under: the weights' fingerprint (ModelWeights::
// fingerprint: the tensors' bytes as stored, the load dtype) with the KV shape's layers, heads,
// head_dim, block size, K/V dtypes, rotation and per-channel K: anything that changes a block's
// bytes.
// Per-channel K's field: 2 for its first layout (codes row by row), 4 for the code columns of
// kv_channel_blocks.h, so a disk tier written before the change reads as another model's.
inline constexpr int64_t kChannelKLayout = 4;
inline uint64_t kv_fingerprint(uint64_t weights_fingerprint, const KvShape& s) {
  const int64_t fields[] = {s.n_layers,
                            s.block_size,
                            s.n_kv_heads,
                            s.head_dim,
                            static_cast<int64_t>(s.k_dtype),
                            static_cast<int64_t>(s.v_dtype),
                            (s.rotate_k ? 1 : 0) | (s.k_channel_scales ? kChannelKLayout : 0)};
  const auto* bytes = reinterpret_cast<const uint8_t*>(fields);
  return fnv1a64({bytes, sizeof fields}, weights_fingerprint ^ 0x9E3779B97F4A7C15ull);
}

class KvTierSpill : public KvBlockSpill {
 public:
  KvTierSpill(KvTierStore& tiers, KvStorage& storage)
      : tiers_(tiers), storage_(storage), staging_(static_cast<size_t>(tiers.block_bytes())) {}

  void spill(int32_t block, uint64_t hash, std::span<const int32_t> tokens) override {
    storage_.read_block(block, staging_.data());
    tiers_.put(hash, tokens, staging_);
  }
  bool has(uint64_t hash) override { return tiers_.contains(hash); }
  bool restore(int32_t block, uint64_t hash, std::span<const int32_t> tokens) override {
    if (!tiers_.get(hash, tokens, staging_)) return false;
    storage_.write_block(block, staging_.data());
    return true;
  }

 private:
  KvTierStore& tiers_;
  KvStorage& storage_;
  std::vector<uint8_t> staging_;  // one block
};

}  // namespace ember
