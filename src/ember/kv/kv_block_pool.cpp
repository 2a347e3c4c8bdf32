#include "ember/kv/kv_block_pool.h"

#include <string>

#include "ember/core/error.h"

namespace ember {

KvBlockPool::KvBlockPool(const KvPoolShape& shape) : shape_(shape) {
  if (shape.n_layers <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 ||
      shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    throw Error("KV cache: invalid pool shape");
  }
  size_t floats = static_cast<size_t>(shape.n_layers * layer_floats());
  // Zero-filled: unwritten slots are never read, but deterministic memory keeps tools quiet.
  keys_ = std::make_unique<float[]>(floats);
  values_ = std::make_unique<float[]>(floats);
  ref_counts_.assign(static_cast<size_t>(shape.n_blocks), 0);
  free_list_.reserve(static_cast<size_t>(shape.n_blocks));
  for (int64_t b = shape.n_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

int32_t KvBlockPool::allocate() {
  if (free_list_.empty()) return -1;
  int32_t block = free_list_.back();
  free_list_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void KvBlockPool::retain(int32_t block) {
  if (ref_counts_.at(block) <= 0) throw Error("KV cache: retain of free block " + std::to_string(block));
  ++ref_counts_[block];
}

void KvBlockPool::release(int32_t block) {
  if (ref_counts_.at(block) <= 0) throw Error("KV cache: double release of block " + std::to_string(block));
  if (--ref_counts_[block] == 0) free_list_.push_back(block);
}

cpu::PagedKv KvBlockPool::layer_view(int64_t layer) const {
  cpu::PagedKv view;
  view.k_pool = keys_.get() + layer * layer_floats();
  view.v_pool = values_.get() + layer * layer_floats();
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
