#include "ember/cli/inspect_plan.h"

#include <cstdio>

#include "ember/backend/backend.h"
#include "ember/core/bandwidth_probe.h"
#include "ember/core/error.h"
#include "ember/core/thread_pool.h"

namespace ember::cli {

CapacityPlanInput plan_input(const ModelConfig& c, int64_t weight_bytes,
                             int64_t decode_weight_bytes, int64_t ctx, int64_t batch,
                             const PlanOptions& o) {
  const std::optional<DType> kv = dtype_from_name(o.kv_dtype);
  if (!kv) {
    throw Error::invalid_request("--kv-dtype", "unknown --kv-dtype '" + o.kv_dtype +
                                                   "' (expected f32, f16, bf16, q8_0 or q4_0)");
  }
  kv_bytes_per_element(*kv);  // rejects dtypes a cache cannot hold
  CapacityPlanInput in = capacity_input(c, ctx, batch, *kv);
  in.weight_bytes = weight_bytes;
  in.decode_weight_bytes = decode_weight_bytes;
  if (!o.mem.empty()) in.memory_bytes = parse_byte_size(o.mem);
  if (o.backend != "cpu") {
    // A GPU: its free memory is the budget, its own read bandwidth the decode ceiling.
    BackendOptions bo;
    bo.name = o.backend;
    bo.device = o.device;
    const std::shared_ptr<Backend> backend = make_backend(bo);
    const BackendInfo info = backend->info();
    if (info.device_memory_free_bytes == 0) {
      throw Error::invalid_request("--backend", "inspect --plan --backend: '" + o.backend +
                                                    "' has no device memory to plan for");
    }
    if (!in.memory_bytes) in.memory_bytes = info.device_memory_free_bytes;
    if (o.probe) {
      backend->probe_read_bandwidth(int64_t{1} << 30);  // warm-up pass
      in.bandwidth_bytes_per_s = backend->probe_read_bandwidth(int64_t{1} << 30) * 1e9;
    }
    return in;
  }
  if (o.probe) {
    // 1 GiB in 4 KiB pages: how weights read in place from the file sit in memory.
    const BandwidthProbe probe(size_t{1} << 30, /*huge_pages=*/false);
    const int threads = ThreadPool::default_thread_count();
    probe.measure(threads);  // warm-up pass
    in.bandwidth_bytes_per_s = probe.measure(threads) * 1e9;
  }
  return in;
}

void print_plan_text(const CapacityPlanInput& in, const CapacityPlan& p, const PlanOptions& o) {
  const std::string& kv_dtype = o.kv_dtype;
  std::printf("\nplan (ctx %lld x batch %lld, KV %s):\n", (long long)in.ctx, (long long)in.batch,
              kv_dtype.c_str());
  std::printf("  weights              %s (a decode step reads %s)\n",
              format_bytes(static_cast<double>(in.weight_bytes)).c_str(),
              format_bytes(static_cast<double>(in.decode_weight_bytes)).c_str());
  std::printf("  KV per token         %s (L %lld x 2 x %lld kv heads x %lld)",
              format_bytes(p.kv_bytes_per_token).c_str(), (long long)in.n_layers,
              (long long)in.n_kv_heads, (long long)in.head_dim);
  if (in.n_kv_heads != in.n_heads) {
    std::printf("; with full multi-head KV it would be %s",
                format_bytes(p.kv_bytes_per_token_mha).c_str());
  }
  std::string resident = in.sliding_window > 0 ? " (every layer's window)" : "";
  if (in.window_layers > 0) {
    resident = " (" + std::to_string(in.window_layers) + " sliding layers hold their window of " +
               std::to_string(in.layer_window) + ")";
  }
  std::printf("\n  KV per sequence      %s for %lld resident tokens%s\n",
              format_bytes(p.kv_bytes_per_sequence).c_str(), (long long)p.resident_tokens,
              resident.c_str());
  std::printf("  KV for the batch     %s", format_bytes(p.kv_bytes_total).c_str());
  if (in.n_kv_heads != in.n_heads) {
    std::printf(" (multi-head equivalent %s)", format_bytes(p.kv_bytes_total_mha).c_str());
  }
  std::printf("\n  weights + KV         %s\n",
              format_bytes(static_cast<double>(in.weight_bytes) + p.kv_bytes_total).c_str());
  if (p.sequences_that_fit) {
    std::printf("  memory %s: %lld sequences of %lld tokens fit beside the weights%s\n",
                format_bytes(static_cast<double>(*in.memory_bytes)).c_str(),
                (long long)*p.sequences_that_fit, (long long)in.ctx,
                *p.sequences_that_fit >= in.batch ? "" : " (fewer than the batch)");
  }
  if (p.decode_tokens_per_s_batch1) {
    if (o.bandwidth_given) {
      std::printf("  read bandwidth       %.1f GB/s given (--bandwidth)\n",
                  *in.bandwidth_bytes_per_s / 1e9);
    } else if (o.backend == "cpu") {
      std::printf("  read bandwidth       %.1f GB/s measured (%d threads)\n",
                  *in.bandwidth_bytes_per_s / 1e9, ThreadPool::default_thread_count());
    } else {
      std::printf("  read bandwidth       %.1f GB/s measured (%s device %d memory)\n",
                  *in.bandwidth_bytes_per_s / 1e9, o.backend.c_str(), o.device);
    }
    std::printf(
        "  decode ceiling       %.1f tok/s at batch 1, %.1f tok/s in total at batch %lld "
        "(weights + KV streamed once per step, at full context)\n",
        *p.decode_tokens_per_s_batch1, *p.decode_tokens_per_s_batch, (long long)in.batch);
  }
}

nlohmann::ordered_json plan_json(const CapacityPlanInput& in, const CapacityPlan& p) {
  nlohmann::ordered_json j;
  j["ctx"] = in.ctx;
  j["batch"] = in.batch;
  j["kv_dtype"] = dtype_name(in.kv_dtype);
  j["weight_bytes"] = in.weight_bytes;
  j["decode_weight_bytes"] = in.decode_weight_bytes;
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["kv_bytes_per_token_mha"] = p.kv_bytes_per_token_mha;
  j["resident_tokens"] = p.resident_tokens;
  j["kv_bytes_per_sequence"] = p.kv_bytes_per_sequence;
  j["kv_bytes_total"] = p.kv_bytes_total;
  j["kv_bytes_total_mha"] = p.kv_bytes_total_mha;
  j["memory_bytes"] = in.memory_bytes ? nlohmann::ordered_json(*in.memory_bytes) : nullptr;
  j["sequences_that_fit"] =
      p.sequences_that_fit ? nlohmann::ordered_json(*p.sequences_that_fit) : nullptr;
  j["bandwidth_gb_per_s"] =
      in.bandwidth_bytes_per_s ? nlohmann::ordered_json(*in.bandwidth_bytes_per_s / 1e9) : nullptr;
  j["decode_tokens_per_s_batch1"] = p.decode_tokens_per_s_batch1
                                        ? nlohmann::ordered_json(*p.decode_tokens_per_s_batch1)
                                        : nullptr;
  j["decode_tokens_per_s_batch"] =
      p.decode_tokens_per_s_batch ? nlohmann::ordered_json(*p.decode_tokens_per_s_batch) : nullptr;
  return j;
}

}  // namespace ember::cli
