#include "ember/kv/kv_block_pool.h"

#include "ember/core/error.h"

namespace ember {

KvBlockPool::KvBlockPool(const KvPoolShape& shape) : shape_(shape) {
  if (shape.n_layers <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 ||
      shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    throw Error("KV cache: invalid pool shape");
  }
  size_t floats = static_cast<size_t>(shape.n_layers * layer_floats());
  // Zero-filled: unwritten slots are never read, but deterministic memory keeps tools quiet.
  keys_.assign(floats, 0.0f);
  values_.assign(floats, 0.0f);
}

cpu::PagedKv KvBlockPool::layer_view(int64_t layer) const {
  cpu::PagedKv view;
  view.k_pool = keys_.data() + layer * layer_floats();
  view.v_pool = values_.data() + layer * layer_floats();
  view.block_size = shape_.block_size;
  view.n_kv_heads = shape_.n_kv_heads;
  view.head_dim = shape_.head_dim;
  return view;
}

int64_t KvBlockPool::bytes_per_token() const {
  return shape_.n_layers * 2 * shape_.n_kv_heads * shape_.head_dim *
         static_cast<int64_t>(sizeof(float));
}

}  // namespace ember
