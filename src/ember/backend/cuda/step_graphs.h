// CUDA graphs for repeated steps. The backend defers its kernel launches until the step's result is
// read (to_host), recording beside each launch the exact bytes of its arguments (pointers, sizes,
// scalars) as the step's signature. A step whose signature was seen before — every decode step of
// one batch size, once the activation buffers and batch uploads sit at fixed addresses — is
// captured once into a graph and then replayed with one launch; the batch's token ids, positions
// and block tables are copied in before the replay, so the graph reads each step's values.
// Steps that call cuBLAS or change shape run their launches directly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ember/backend/attention_scores.h"
#include "ember/backend/cuda/kernels.h"
#include "ember/backend/weight.h"

namespace ember::cuda {

// The bytes that decide what a launch does. Structs are added field by field (no padding bytes).
class Signature {
 public:
  template <typename T>
  requires(std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>) void add(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void add(const WeightMatrix& w);
  void add(const DeviceKvLayer& kv);
  void add(const DeviceTokens& b);
  void add(const DeviceTables& t);
  void add(const AttentionScores& s);
  template <typename... Ts>
  void add_all(const Ts&... vs) {
    (add(vs), ...);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  void clear() { bytes_.clear(); }
  void truncate(size_t size) { bytes_.resize(size); }
  bool empty() const { return bytes_.empty(); }

 private:
  std::vector<uint8_t> bytes_;
};

class StepGraphs {
 public:
  explicit StepGraphs(bool enabled) : enabled_(enabled) {}
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs();

  // Runs `launches` on `stream`: replays the graph of an identical earlier step, captures one for
  // a step seen once before, or launches them directly (graph_ok false: always directly).
  void run(cudaStream_t stream, const std::vector<std::function<void()>>& launches,
           const Signature& signature, bool graph_ok);

  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }

 private:
  struct Entry {
    std::vector<uint8_t> signature;
    cudaGraphExec_t exec = nullptr;
    int64_t seen = 0;
  };
  void drop_all();

  bool enabled_;
  std::unordered_map<uint64_t, Entry> entries_;
  int64_t replays_ = 0, captures_ = 0;
};

}  // namespace ember::cuda
