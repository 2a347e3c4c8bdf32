// The paged KV cache's storage: a pool of fixed-size blocks shared by all sequences. A block id
// names the same slot range in every layer, so one block table per sequence serves all layers.
// Per layer, K and V are each laid out as
//   [n_blocks, n_kv_heads, block_size, head_dim] in `dtype` (f32, or f16 for half the bytes)
// (see cpu::PagedKv: one kv head's rows of a block are contiguous).
// Which blocks are free, shared or cached is KvBlockManager's business; this is only memory.
#pragma once

#include <cstdint>
#include "ember/core/huge_pages.h"
#include "ember/kernels/cpu/kernels.h"

namespace ember {

struct KvPoolShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::F32;  // F32 or F16
};

class KvBlockPool {
 public:
  explicit KvBlockPool(const KvPoolShape& shape);

  const KvPoolShape& shape() const { return shape_; }
  int64_t block_size() const { return shape_.block_size; }
  int64_t n_blocks() const { return shape_.n_blocks; }

  DType dtype() const { return shape_.dtype; }

  // Element offset of (block, slot, kv head)'s head_dim values inside a layer's K or V array.
  int64_t row_offset(int32_t block, int64_t slot, int64_t kv_head) const {
    return ((static_cast<int64_t>(block) * shape_.n_kv_heads + kv_head) * shape_.block_size +
            slot) *
           shape_.head_dim;
  }
  // Address of element `offset` of layer `layer`'s K (V) array.
  void* k_at(int64_t layer, int64_t offset) { return keys_.data() + byte_offset(layer, offset); }
  void* v_at(int64_t layer, int64_t offset) { return values_.data() + byte_offset(layer, offset); }
  cpu::PagedKv layer_view(int64_t layer) const;

  // Bytes of K+V one token occupies across all layers, and one block.
  int64_t bytes_per_token() const;
  int64_t bytes_per_block() const { return bytes_per_token() * shape_.block_size; }

 private:
  int64_t element_bytes() const { return shape_.dtype == DType::F16 ? 2 : 4; }
  int64_t layer_elements() const {
    return shape_.n_blocks * shape_.block_size * shape_.n_kv_heads * shape_.head_dim;
  }
  int64_t byte_offset(int64_t layer, int64_t offset) const {
    return (layer * layer_elements() + offset) * element_bytes();
  }

  KvPoolShape shape_;
  // Huge pages (huge_pages.h): attention reads blocks scattered over the pool, a 4 KiB page each.
  HugePageBuffer keys_;
  HugePageBuffer values_;
};

}  // namespace ember
