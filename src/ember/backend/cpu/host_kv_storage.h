// KV storage in host memory, as the cpu and reference backends keep it. Per layer, K and V are
// each laid out as
//   [n_blocks, n_kv_heads, block_size] rows of head_dim values in the shape's K (V) dtype, a row
//   being kv_row_bytes() bytes (kv_row_format.h; cpu::PagedKv): one kv head's rows of a block are
//   contiguous, so attention streams them.
// Which blocks are free, shared or cached is the block manager's business (kv/); this is memory.
#pragma once

#include <cstdint>

#include "ember/backend/backend.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/core/huge_pages.h"

namespace ember::cpu {

class HostKvStorage : public KvStorage {
 public:
  explicit HostKvStorage(const KvShape& shape);

  // Index of (block, slot, kv head)'s row inside a layer's K or V array.
  int64_t row_index(int32_t block, int64_t slot, int64_t kv_head) const {
    const KvShape& s = shape();
    return (static_cast<int64_t>(block) * s.n_kv_heads + kv_head) * s.block_size + slot;
  }
  // Address of row `index` of layer `layer`'s K (V) array.
  void* k_at(int64_t layer, int64_t index) {
    return keys_.data() + (layer * layer_rows() + index) * shape().k_row_bytes();
  }
  void* v_at(int64_t layer, int64_t index) {
    return values_.data() + (layer * layer_rows() + index) * shape().v_row_bytes();
  }
  PagedKv layer_view(int64_t layer) const;
  void read_block(int32_t block, uint8_t* out) const override;
  void write_block(int32_t block, const uint8_t* in) override;

 private:
  int64_t layer_rows() const {
    const KvShape& s = shape();
    return s.n_blocks * s.block_size * s.n_kv_heads;
  }

  // Huge pages (huge_pages.h): attention reads blocks scattered over the pool, a 4 KiB page each.
  HugePageBuffer keys_;
  HugePageBuffer values_;
};

}  // namespace ember::cpu
