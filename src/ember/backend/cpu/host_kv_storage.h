// KV storage in host memory, as the cpu and reference backends keep it. Per layer, K and V are
// each laid out as
//   [n_blocks, n_kv_heads, block_size] rows of head_dim values in the shape's K (V) dtype, a row
//   being kv_row_bytes() bytes (kv_row_format.h; cpu::PagedKv): one kv head's rows of a block are
//   contiguous, so attention streams them.
// Which blocks are free, shared or cached is the block manager's business (kv/); this is memory.
#pragma once

#include <cstdint>
#include <vector>

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

  // Per-channel K (KvShape::k_channel_scales, kv_channel_blocks.h). A store of `layer`'s K for
  // `batch` is begin_k_writes() (serial: every block the batch writes gets exact rows and is
  // unsealed), the rows written with k_exact_row() (threads may share the work), then
  // seal_k_blocks() (serial: every block before the one holding a sequence's last position of the
  // batch is quantized, if it is not already). Exact rows are kept for the blocks written in the
  // last two steps (a speculative step's rejected guesses send a sequence back into its previous
  // block), and for others up to a bound (exact_rows_cap()); a block whose exact rows were dropped
  // and that is written again gets them back from its sealed codes (counted by k_restaged()).
  void begin_k_writes(int64_t layer, const Batch& batch);
  uint16_t* k_exact_row(int64_t layer, int32_t block, int64_t slot, int64_t kv_head) {
    return k_exact_[static_cast<size_t>(block)].data() + exact_index(layer, slot, kv_head);
  }
  void seal_k_blocks(int64_t layer, const Batch& batch);
  int64_t exact_rows_cap() const { return kv_channel_exact_blocks_cap(shape().n_blocks); }
  int64_t k_blocks_with_exact_rows() const { return static_cast<int64_t>(k_staged_.size()); }
  int64_t k_restaged() const { return k_restaged_; }
  int64_t side_bytes() const override {
    return k_blocks_with_exact_rows() * shape().k_exact_bytes_per_block();
  }

 private:
  int64_t exact_index(int64_t layer, int64_t slot, int64_t kv_head) const {
    const KvShape& s = shape();
    return ((layer * s.n_kv_heads + kv_head) * s.block_size + slot) * s.head_dim;
  }
  bool sealed(int32_t block, int64_t layer) const {
    return k_sealed_[static_cast<size_t>(block * shape().n_layers + layer)] != 0;
  }
  // Quantizes `layer` of `block` from its exact rows (const: a sealed region is a function of the
  // exact rows, so read_block may seal what no step has yet).
  void seal(int32_t block, int64_t layer) const;
  void give_exact_rows(int32_t block, bool from_sealed);
  void drop_exact_rows(int64_t step);

  int64_t layer_rows() const {
    const KvShape& s = shape();
    return s.n_blocks * s.block_size * s.n_kv_heads;
  }

  // Huge pages (huge_pages.h): attention reads blocks scattered over the pool, a 4 KiB page each.
  // mutable: see seal().
  mutable HugePageBuffer keys_;
  HugePageBuffer values_;
  // Per-channel K only. Exact rows per block, empty when it has none: f16 [n_layers, n_kv_heads,
  // block_size, head_dim]; k_exact_ptr_ holds their addresses (null when none) for PagedKv.
  std::vector<std::vector<uint16_t>> k_exact_;
  std::vector<const uint16_t*> k_exact_ptr_;
  mutable std::vector<uint8_t> k_sealed_;  // [n_blocks, n_layers]: 1 = the region is current
  std::vector<int64_t> k_last_step_;       // [n_blocks]: the step that last wrote the block
  std::vector<int32_t> k_staged_;          // the blocks that have exact rows
  int64_t k_step_ = 0;
  int64_t k_restaged_ = 0;
};

}  // namespace ember::cpu
