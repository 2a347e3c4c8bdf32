// A Batch (backend/batch.h) as kernels read it: the host vectors copied into device memory once per
// step. Ops receive the same host Batch many times per forward pass; the uploader compares it with
// what it sent last and copies only when it changed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ember/backend/batch.h"

namespace ember::cuda {

// Per token; device pointers, [T] each.
struct DeviceTokens {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* sequence_of = nullptr;
  int32_t n_tokens = 0;
};

// Per sequence, the offset of its block table in `tables` (block ids, flattened).
struct DeviceTables {
  const int32_t* table_offset = nullptr;  // [S]
  const int32_t* tables = nullptr;
  int32_t n_sequences = 0;
};

// Host ints -> device ints, through a pinned buffer; the copy is ordered on `stream`, so kernels
// launched after upload() see the data. A new upload waits until the previous copy has left the
// pinned buffer.
class DeviceInts {
 public:
  DeviceInts() = default;
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  ~DeviceInts();
  // The device copy of `ints` (unchanged contents since the last call: no copy at all).
  const int32_t* upload(std::span<const int32_t> ints, cudaStream_t stream);
  // Called before a copy that changes the contents. The backend keeps a step's launches pending:
  // a buffer that pending launches read (`used` since the backend last launched) must not change
  // under them, so the callback launches them first.
  std::function<void(DeviceInts*)> on_change;
  bool used = false;

 private:
  std::vector<int32_t> last_;
  bool valid_ = false;
  int32_t* pinned_ = nullptr;
  int32_t* device_ = nullptr;
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

class BatchUploader {
 public:
  void set_on_change(const std::function<void(DeviceInts*)>& f) {
    token_ints_.on_change = f;
    table_ints_.on_change = f;
    window_table_ints_.on_change = f;
  }
  void clear_used() { token_ints_.used = table_ints_.used = window_table_ints_.used = false; }
  DeviceTokens tokens(const Batch& batch, cudaStream_t stream);
  // Block tables cover ceil((start_position + n_tokens) / block_size) entries per sequence.
  // `window`: the sequences' window block tables (BatchSequence::window_block_table, for a
  // sliding-window layers' pool: KvShape::window_table), kept in a buffer of their own so that
  // layers of the two pools interleave without a new upload per layer.
  DeviceTables tables(const Batch& batch, int64_t block_size, bool window, cudaStream_t stream);

 private:
  std::vector<int32_t> packed_;
  DeviceInts token_ints_;
  DeviceInts table_ints_;
  DeviceInts window_table_ints_;
};

}  // namespace ember::cuda
