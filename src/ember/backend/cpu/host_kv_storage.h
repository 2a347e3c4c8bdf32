// KV storage in host memory, as the cpu and reference backends keep it. Per layer, K and V are
// each laid out as
//   [n_blocks, n_kv_heads, block_size, head_dim] in the shape's dtype (f32, or f16)
// (cpu::PagedKv): one kv head's rows of a block are contiguous, so attention streams them.
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

  // Element offset of (block, slot, kv head)'s head_dim values inside a layer's K or V array.
  int64_t row_offset(int32_t block, int64_t slot, int64_t kv_head) const {
    const KvShape& s = shape();
    return ((static_cast<int64_t>(block) * s.n_kv_heads + kv_head) * s.block_size + slot) *
           s.head_dim;
  }
  // Address of element `offset` of layer `layer`'s K (V) array.
  void* k_at(int64_t layer, int64_t offset) { return keys_.data() + byte_offset(layer, offset); }
  void* v_at(int64_t layer, int64_t offset) { return values_.data() + byte_offset(layer, offset); }
  PagedKv layer_view(int64_t layer) const;

 private:
  int64_t layer_elements() const {
    const KvShape& s = shape();
    return s.n_blocks * s.block_size * s.n_kv_heads * s.head_dim;
  }
  int64_t byte_offset(int64_t layer, int64_t offset) const {
    return (layer * layer_elements() + offset) * shape().element_bytes();
  }

  // Huge pages (huge_pages.h): attention reads blocks scattered over the pool, a 4 KiB page each.
  HugePageBuffer keys_;
  HugePageBuffer values_;
};

}  // namespace ember::cpu
