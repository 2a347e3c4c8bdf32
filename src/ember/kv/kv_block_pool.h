// The paged KV cache's storage: a pool of fixed-size blocks shared by all sequences. A block id
// names the same slot range in every layer, so one block table per sequence serves all layers.
// Per layer, K and V are each laid out as
//   [n_blocks, block_size, n_kv_heads, head_dim] float32
// Which blocks are free, shared or cached is KvBlockManager's business; this is only memory.
#pragma once

#include <cstdint>
#include "ember/core/aligned_vector.h"
#include "ember/kernels/cpu/kernels.h"

namespace ember {

struct KvPoolShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

class KvBlockPool {
 public:
  explicit KvBlockPool(const KvPoolShape& shape);

  const KvPoolShape& shape() const { return shape_; }
  int64_t block_size() const { return shape_.block_size; }
  int64_t n_blocks() const { return shape_.n_blocks; }

  // Float offset of (block, slot) inside a layer's K or V array.
  int64_t slot_offset(int32_t block, int64_t slot) const {
    return (static_cast<int64_t>(block) * shape_.block_size + slot) * shape_.n_kv_heads *
           shape_.head_dim;
  }
  float* k_layer(int64_t layer) { return keys_.data() + layer * layer_floats(); }
  float* v_layer(int64_t layer) { return values_.data() + layer * layer_floats(); }
  cpu::PagedKv layer_view(int64_t layer) const;

  // Bytes of K+V one token occupies across all layers, and one block.
  int64_t bytes_per_token() const;
  int64_t bytes_per_block() const { return bytes_per_token() * shape_.block_size; }

 private:
  int64_t layer_floats() const {
    return shape_.n_blocks * shape_.block_size * shape_.n_kv_heads * shape_.head_dim;
  }

  KvPoolShape shape_;
  AlignedVector<float> keys_;
  AlignedVector<float> values_;
};

}  // namespace ember
