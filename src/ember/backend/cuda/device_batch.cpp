#include "ember/backend/cuda/device_batch.h"

#include <cstring>
#include <string>

#include "ember/backend/cuda/cuda_check.h"
#include "ember/core/error.h"

namespace ember::cuda {

DeviceInts::~DeviceInts() {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  if (copied_ != nullptr) cudaEventDestroy(copied_);
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (device_ != nullptr) cudaFree(device_);
}

const int32_t* DeviceInts::upload(std::span<const int32_t> ints, cudaStream_t stream) {
  if (valid_ && ints.size() == last_.size() &&
      std::memcmp(ints.data(), last_.data(), ints.size_bytes()) == 0) {
    used = true;
    return device_;
  }
  if (on_change) on_change(this);
  if (copied_ == nullptr)
    check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "event");
  check(cudaEventSynchronize(copied_), "waiting for the previous batch upload");
  if (ints.size() > capacity_ || device_ == nullptr) {
    const size_t want = std::max<size_t>(ints.size(), 2 * capacity_) + 64;
    if (pinned_ != nullptr) check(cudaFreeHost(pinned_), "cudaFreeHost");
    if (device_ != nullptr) check(cudaFree(device_), "cudaFree");
    pinned_ = nullptr;
    device_ = nullptr;
    check(cudaMallocHost(reinterpret_cast<void**>(&pinned_), want * sizeof(int32_t)),
          "pinned batch buffer");
    check(cudaMalloc(reinterpret_cast<void**>(&device_), want * sizeof(int32_t)),
          "device batch buffer");
    capacity_ = want;
  }
  if (!ints.empty()) {
    std::memcpy(pinned_, ints.data(), ints.size_bytes());
    check(cudaMemcpyAsync(device_, pinned_, ints.size_bytes(), cudaMemcpyHostToDevice, stream),
          "batch upload");
  }
  check(cudaEventRecord(copied_, stream), "event record");
  last_.assign(ints.begin(), ints.end());
  valid_ = true;
  used = true;
  return device_;
}

DeviceTokens BatchUploader::tokens(const Batch& batch, cudaStream_t stream) {
  const size_t T = batch.tokens.size();
  packed_.resize(3 * T);
  std::memcpy(packed_.data(), batch.tokens.data(), T * sizeof(int32_t));
  std::memcpy(packed_.data() + T, batch.positions.data(), T * sizeof(int32_t));
  std::memcpy(packed_.data() + 2 * T, batch.sequence_of.data(), T * sizeof(int32_t));
  const int32_t* d = token_ints_.upload(packed_, stream);
  return {d, d + T, d + 2 * T, static_cast<int32_t>(T)};
}

DeviceTables BatchUploader::tables(const Batch& batch, int64_t block_size, bool window,
                                   cudaStream_t stream) {
  const size_t S = batch.sequences.size();
  packed_.assign(S, 0);
  for (size_t s = 0; s < S; ++s) {
    const BatchSequence& seq = batch.sequences[s];
    packed_[s] = static_cast<int32_t>(packed_.size() - S);
    const int64_t n = (seq.start_position + seq.n_tokens + block_size - 1) / block_size;
    const int32_t* table = window ? seq.window_block_table : seq.block_table;
    if (table == nullptr) {
      throw Error("cuda: a sequence without the " + std::string(window ? "window " : "") +
                  "block table its KV storage reads");
    }
    packed_.insert(packed_.end(), table, table + n);
  }
  const int32_t* d = (window ? window_table_ints_ : table_ints_).upload(packed_, stream);
  return {d, d + S, static_cast<int32_t>(S)};
}

}  // namespace ember::cuda
