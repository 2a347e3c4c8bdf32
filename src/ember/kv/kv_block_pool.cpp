#include "ember/kv/kv_block_pool.h"

#include <string>

#include "ember/core/error.h"

namespace ember {

KvBlockPool::KvBlockPool(const KvPoolShape& shape) : shape_(shape) {
  if (shape.n_layers <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 ||
      shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    throw Error("KV cache: invalid pool shape");
  }
  if (shape.dtype != DType::F32 && shape.dtype != DType::F16) {
    throw Error(std::string("KV cache dtype must be f32 or f16, not ") + dtype_name(shape.dtype));
  }
  const auto bytes = static_cast<size_t>(shape.n_layers * layer_elements() * element_bytes());
  // Zero-filled (fresh anonymous memory): unwritten slots are never read, but deterministic memory
  // keeps tools quiet. Faulted in now, as the engine's first steps should not pay for it.
  keys_ = HugePageBuffer(bytes, /*prefault=*/true);
  values_ = HugePageBuffer(bytes, /*prefault=*/true);
}

cpu::PagedKv KvBlockPool::layer_view(int64_t layer) const {
  cpu::PagedKv view;
  view.k_pool = keys_.data() + byte_offset(layer, 0);
  view.v_pool = values_.data() + byte_offset(layer, 0);
  view.dtype = shape_.dtype;
  view.block_size = shape_.block_size;
  view.n_kv_heads = shape_.n_kv_heads;
  view.head_dim = shape_.head_dim;
  return view;
}

int64_t KvBlockPool::bytes_per_token() const {
  return shape_.n_layers * 2 * shape_.n_kv_heads * shape_.head_dim * element_bytes();
}

}  // namespace ember
