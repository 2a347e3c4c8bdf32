#include "ember/backend/cpu/host_kv_storage.h"

#include <cstring>
#include <string>

#include "ember/core/error.h"

namespace ember::cpu {

namespace {

const KvShape& checked(const KvShape& shape) {
  if (shape.n_layers <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 ||
      shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    throw Error("KV cache: invalid pool shape");
  }
  for (DType dtype : {shape.k_dtype, shape.v_dtype}) {
    if (std::string problem = kv_dtype_problem(dtype, shape.head_dim); !problem.empty()) {
      throw Error("KV cache: " + problem);
    }
  }
  if (shape.rotate_k && kv_quant_group(shape.head_dim) == 0) {
    throw Error("KV cache: --kv-rotate needs head_dim a multiple of 8; this model's is " +
                std::to_string(shape.head_dim));
  }
  return shape;
}

}  // namespace

HostKvStorage::HostKvStorage(const KvShape& shape) : KvStorage(checked(shape)) {
  const int64_t rows = shape.n_layers * layer_rows();
  // Zero-filled (fresh anonymous memory): unwritten slots are never read, but deterministic memory
  // keeps tools quiet. Faulted in now, as the engine's first steps should not pay for it.
  keys_ = HugePageBuffer(static_cast<size_t>(rows * shape.k_row_bytes()), /*prefault=*/true);
  values_ = HugePageBuffer(static_cast<size_t>(rows * shape.v_row_bytes()), /*prefault=*/true);
}

// A block's rows are contiguous within each layer's K (V) array: rows [block x n_kv x bs, + n_kv x
// bs), as row_index() numbers them.
void HostKvStorage::read_block(int32_t block, uint8_t* out) const {
  const KvShape& s = shape();
  const int64_t rows = s.n_kv_heads * s.block_size, first = row_index(block, 0, 0);
  const auto k_bytes = static_cast<size_t>(rows * s.k_row_bytes());
  const auto v_bytes = static_cast<size_t>(rows * s.v_row_bytes());
  for (int64_t layer = 0; layer < s.n_layers; ++layer) {
    std::memcpy(out, keys_.data() + (layer * layer_rows() + first) * s.k_row_bytes(), k_bytes);
    out += k_bytes;
    std::memcpy(out, values_.data() + (layer * layer_rows() + first) * s.v_row_bytes(), v_bytes);
    out += v_bytes;
  }
}

void HostKvStorage::write_block(int32_t block, const uint8_t* in) {
  const KvShape& s = shape();
  const int64_t rows = s.n_kv_heads * s.block_size, first = row_index(block, 0, 0);
  const auto k_bytes = static_cast<size_t>(rows * s.k_row_bytes());
  const auto v_bytes = static_cast<size_t>(rows * s.v_row_bytes());
  for (int64_t layer = 0; layer < s.n_layers; ++layer) {
    std::memcpy(k_at(layer, first), in, k_bytes);
    in += k_bytes;
    std::memcpy(v_at(layer, first), in, v_bytes);
    in += v_bytes;
  }
}

PagedKv HostKvStorage::layer_view(int64_t layer) const {
  const KvShape& s = shape();
  PagedKv view;
  view.k_pool = keys_.data() + layer * layer_rows() * s.k_row_bytes();
  view.v_pool = values_.data() + layer * layer_rows() * s.v_row_bytes();
  view.k_dtype = s.k_dtype;
  view.v_dtype = s.v_dtype;
  view.k_row_bytes = s.k_row_bytes();
  view.k_rotated = s.rotate_k;
  view.v_row_bytes = s.v_row_bytes();
  view.block_size = s.block_size;
  view.n_kv_heads = s.n_kv_heads;
  view.head_dim = s.head_dim;
  return view;
}

}  // namespace ember::cpu
