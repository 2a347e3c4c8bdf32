// A recorded trace as JSON (`ember trace --json`, and the data the HTML page draws): the model and
// machine, the tokens, the logit lens, attention rows, residual stream statistics, the KV cache
// per step next to its formula, and the roofline per step, phase and op.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/tokenizer/tokenizer.h"
#include "ember/trace/trace_recorder.h"

namespace ember {

// Where the trace ran: what the roofline is drawn against.
struct TraceMachine {
  std::string backend, kernels;
  int64_t threads = 0;
  double read_gbps = 0;            // measured read bandwidth, all threads (0: not measured)
  std::vector<ComputePeak> peaks;  // measured compute ceilings (empty: not measured)
};

// The backend's name, kernels and threads, and with `probe` its measured read bandwidth (a
// probe_mb MiB buffer) and compute peaks (a second or so; a line on stderr says so).
TraceMachine measure_trace_machine(Backend& backend, bool probe, int probe_mb);

struct TraceContext {
  std::string model_name;
  std::string weight_dtype;  // the matrices' dtype, e.g. "bf16"
  KvShape kv;                // the engine's KV cache
  const Tokenizer* tokenizer = nullptr;
  TraceMachine machine;
};

// KV bytes one token holds by the formula: n_layers x n_kv_heads x head_dim x (bytes per K value
// + bytes per V value), i.e. L x 2 x n_kv x head_dim x bytes when K and V share a dtype.
double kv_formula_bytes_per_token(const KvShape& kv);

nlohmann::ordered_json trace_json(const TraceRecorder& trace, const TraceContext& context);

}  // namespace ember
