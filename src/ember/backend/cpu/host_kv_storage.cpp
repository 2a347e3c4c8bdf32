#include "ember/backend/cpu/host_kv_storage.h"

#include <string>

#include "ember/core/error.h"

namespace ember::cpu {

namespace {

const KvShape& checked(const KvShape& shape) {
  if (shape.n_layers <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 ||
      shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    throw Error("KV cache: invalid pool shape");
  }
  if (shape.dtype != DType::F32 && shape.dtype != DType::F16) {
    throw Error(std::string("KV cache dtype must be f32 or f16, not ") + dtype_name(shape.dtype));
  }
  return shape;
}

}  // namespace

HostKvStorage::HostKvStorage(const KvShape& shape) : KvStorage(checked(shape)) {
  const auto bytes = static_cast<size_t>(shape.n_layers * layer_elements() * shape.element_bytes());
  // Zero-filled (fresh anonymous memory): unwritten slots are never read, but deterministic memory
  // keeps tools quiet. Faulted in now, as the engine's first steps should not pay for it.
  keys_ = HugePageBuffer(bytes, /*prefault=*/true);
  values_ = HugePageBuffer(bytes, /*prefault=*/true);
}

PagedKv HostKvStorage::layer_view(int64_t layer) const {
  const KvShape& s = shape();
  PagedKv view;
  view.k_pool = keys_.data() + byte_offset(layer, 0);
  view.v_pool = values_.data() + byte_offset(layer, 0);
  view.dtype = s.dtype;
  view.block_size = s.block_size;
  view.n_kv_heads = s.n_kv_heads;
  view.head_dim = s.head_dim;
  return view;
}

}  // namespace ember::cpu
