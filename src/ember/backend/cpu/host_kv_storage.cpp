#include "ember/backend/cpu/host_kv_storage.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "ember/backend/kv_channel_blocks.h"
#include "ember/core/error.h"
#include "ember/core/half.h"

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
  if (shape.k_channel_scales) {
    if (std::string problem = kv_channel_problem(shape.k_dtype, shape.head_dim, shape.block_size);
        !problem.empty()) {
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
  if (shape.k_channel_scales) {
    // Every block starts sealed (zero codes): its first write gives it exact rows.
    const auto n_blocks = static_cast<size_t>(shape.n_blocks);
    k_exact_.resize(n_blocks);
    k_exact_ptr_.assign(n_blocks, nullptr);
    k_sealed_.assign(n_blocks * static_cast<size_t>(shape.n_layers), 1);
    k_last_step_.assign(n_blocks, -1);
  }
}

void HostKvStorage::seal(int32_t block, int64_t layer) const {
  const KvShape& s = shape();
  const uint16_t* exact = k_exact_[static_cast<size_t>(block)].data();
  for (int64_t g = 0; g < s.n_kv_heads; ++g) {
    const int64_t first = row_index(block, 0, g);
    auto* region = keys_.data() + (layer * layer_rows() + first) * s.k_row_bytes();
    kv_channel_quantize(exact + exact_index(layer, 0, g), s.head_dim, s.block_size, region);
  }
  k_sealed_[static_cast<size_t>(block * s.n_layers + layer)] = 1;
}

// Exact rows for a block that has none, and so is sealed in every layer: zeros for a block
// written from its first slot, else (a sequence came back to a block whose exact rows went) its
// sealed values.
void HostKvStorage::give_exact_rows(int32_t block, bool from_sealed) {
  const KvShape& s = shape();
  auto& exact = k_exact_[static_cast<size_t>(block)];
  exact.resize(static_cast<size_t>(s.n_layers * s.n_kv_heads * s.block_size * s.head_dim));
  k_exact_ptr_[static_cast<size_t>(block)] = exact.data();
  k_staged_.push_back(block);
  if (!from_sealed) return;
  ++k_restaged_;
  std::vector<float> row(static_cast<size_t>(s.head_dim));
  for (int64_t layer = 0; layer < s.n_layers; ++layer) {
    for (int64_t g = 0; g < s.n_kv_heads; ++g) {
      const auto* region = static_cast<const uint8_t*>(k_at(layer, row_index(block, 0, g)));
      for (int64_t slot = 0; slot < s.block_size; ++slot) {
        kv_channel_read_row(region, slot, s.head_dim, s.block_size, row.data());
        uint16_t* out = exact.data() + exact_index(layer, slot, g);
        for (int64_t d = 0; d < s.head_dim; ++d) out[d] = f32_to_f16(row[static_cast<size_t>(d)]);
      }
    }
  }
}

// Over the bound, the exact rows of the blocks written longest ago (not in this step or the one
// before) go, each sealed first in the layers where it is not.
void HostKvStorage::drop_exact_rows(int64_t step) {
  const auto cap = static_cast<size_t>(exact_rows_cap());
  if (k_staged_.size() <= cap) return;
  std::sort(k_staged_.begin(), k_staged_.end(), [&](int32_t a, int32_t b) {
    return k_last_step_[static_cast<size_t>(a)] > k_last_step_[static_cast<size_t>(b)];
  });
  while (k_staged_.size() > cap && k_last_step_[static_cast<size_t>(k_staged_.back())] < step - 1) {
    const int32_t block = k_staged_.back();
    for (int64_t layer = 0; layer < shape().n_layers; ++layer) {
      if (!sealed(block, layer)) seal(block, layer);
    }
    std::vector<uint16_t>().swap(k_exact_[static_cast<size_t>(block)]);
    k_exact_ptr_[static_cast<size_t>(block)] = nullptr;
    k_staged_.pop_back();
  }
}

void HostKvStorage::begin_k_writes(int64_t layer, const Batch& batch) {
  const KvShape& s = shape();
  const auto written_block = [&](int64_t t) {
    const BatchSequence& seq = batch.sequences[static_cast<size_t>(batch.sequence_of[t])];
    return block_table_of(seq, *this)[batch.positions[static_cast<size_t>(t)] / s.block_size];
  };
  if (layer == 0) {  // a new step
    ++k_step_;
    for (int64_t t = 0; t < batch.size(); ++t) {
      k_last_step_[static_cast<size_t>(written_block(t))] = k_step_;
    }
  }
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int32_t block = written_block(t);
    if (k_exact_[static_cast<size_t>(block)].empty()) {
      give_exact_rows(block, batch.positions[static_cast<size_t>(t)] % s.block_size != 0);
    }
    k_sealed_[static_cast<size_t>(block * s.n_layers + layer)] = 0;
  }
  if (layer == 0) drop_exact_rows(k_step_);
}

void HostKvStorage::seal_k_blocks(int64_t layer, const Batch& batch) {
  const KvShape& s = shape();
  for (const BatchSequence& seq : batch.sequences) {
    const int32_t* table = block_table_of(seq, *this);
    const int64_t last = seq.start_position + seq.n_tokens - 1;
    for (int64_t i = 0; i < last / s.block_size; ++i) {
      if (table[i] >= 0 && !sealed(table[i], layer)) seal(table[i], layer);
    }
  }
}

// A block's rows are contiguous within each layer's K (V) array: rows [block x n_kv x bs, + n_kv x
// bs), as row_index() numbers them.
void HostKvStorage::read_block(int32_t block, uint8_t* out) const {
  const KvShape& s = shape();
  if (s.k_channel_scales) {
    for (int64_t layer = 0; layer < s.n_layers; ++layer) {
      if (!sealed(block, layer)) seal(block, layer);
    }
  }
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
  if (s.k_channel_scales) {  // sealed as written; exact rows come back from them if it is written
    for (int64_t layer = 0; layer < s.n_layers; ++layer) {
      k_sealed_[static_cast<size_t>(block * s.n_layers + layer)] = 1;
    }
    auto& exact = k_exact_[static_cast<size_t>(block)];
    if (!exact.empty()) {
      std::vector<uint16_t>().swap(exact);
      k_exact_ptr_[static_cast<size_t>(block)] = nullptr;
      k_staged_.erase(std::find(k_staged_.begin(), k_staged_.end(), block));
    }
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
  view.k_channel = s.k_channel_scales;
  view.k_exact = k_exact_ptr_.data();
  view.k_exact_offset = exact_index(layer, 0, 0);
  view.v_row_bytes = s.v_row_bytes();
  view.block_size = s.block_size;
  view.n_kv_heads = s.n_kv_heads;
  view.head_dim = s.head_dim;
  return view;
}

}  // namespace ember::cpu
