#include "ember/backend/cuda/step_graphs.h"

#include "ember/backend/cuda/cuda_check.h"

namespace ember::cuda {

namespace {

// Graphs kept at most (decode batch sizes seen; an engine uses a handful).
constexpr size_t kMaxEntries = 64;

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

}  // namespace

void Signature::add(const WeightMatrix& w) {
  add_all(w.dtype, w.data, w.n_rows, w.n_cols, w.row_bytes, w.layout);
}
void Signature::add(const DeviceKvLayer& kv) {
  add_all(kv.k, kv.v, kv.f16, kv.n_kv_heads, kv.head_dim, kv.block_size);
}
void Signature::add(const DeviceTokens& b) {
  add_all(b.tokens, b.positions, b.sequence_of, b.n_tokens);
}
void Signature::add(const DeviceTables& t) {
  add_all(t.table_offset, t.tables, t.n_sequences);
}
void Signature::add(const AttentionScores& s) {
  add_all(s.scale, s.softcap, s.window);
}

StepGraphs::~StepGraphs() {
  drop_all();
}

void StepGraphs::drop_all() {
  for (auto& [key, e] : entries_) {
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
  entries_.clear();
}

void StepGraphs::run(cudaStream_t stream, const std::vector<std::function<void()>>& launches,
                     const Signature& signature, bool graph_ok) {
  if (!enabled_ || !graph_ok) {
    for (const auto& launch : launches) launch();
    return;
  }
  const uint64_t key = fnv1a(signature.bytes());
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.signature != signature.bytes()) {
    // A hash collision: never replay a graph for other arguments.
    for (const auto& launch : launches) launch();
    return;
  }
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) drop_all();
    Entry e;
    e.signature = signature.bytes();
    e.seen = 1;
    entries_.emplace(key, std::move(e));
    for (const auto& launch : launches) launch();
    return;
  }
  Entry& e = it->second;
  if (e.exec == nullptr) {
    // Second sighting: capture. Relaxed mode: other threads' CUDA calls are not disturbed.
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "graph capture");
    cudaGraph_t graph = nullptr;
    try {
      for (const auto& launch : launches) launch();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "graph capture");
    const cudaError_t instantiated = cudaGraphInstantiate(&e.exec, graph, 0);
    cudaGraphDestroy(graph);
    check(instantiated, "graph instantiate");
    ++captures_;
  } else {
    ++replays_;
  }
  ++e.seen;
  check(cudaGraphLaunch(e.exec, stream), "graph launch");
}

}  // namespace ember::cuda
