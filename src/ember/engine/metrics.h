// Prometheus-style counters and histograms for the serving engine, rendered in the text
// exposition format by the /metrics endpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/engine/speculative.h"
#include "ember/kv/kv_tier_store.h"

namespace ember {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends `name_bucket{le="..."} n`, `name_sum`, `name_count` lines; `labels` (e.g.
  // `model_name="m"`) go into every line's label set.
  void render(const std::string& name, const std::string& help, std::string& out,
              const std::string& labels = "") const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct ServingMetrics {
  uint64_t requests_total = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t requests_rejected = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t preemptions_total = 0;
  uint64_t steps_total = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_free = 0;    // never used or uncached
  int64_t kv_blocks_cached = 0;  // free but holding a cached prefix
  int64_t kv_side_bytes = 0;     // ModelRunner::kv_side_bytes
  // Gemma's sliding-window layers in a pool of their own (backend/kv_cache.h): the same four
  // gauges for it, rendered as ember_kv_window_blocks_*.
  bool kv_window_pool = false;
  int64_t kv_window_blocks_total = 0, kv_window_blocks_used = 0, kv_window_blocks_free = 0,
          kv_window_blocks_cached = 0;
  int64_t prefix_queried_blocks = 0;
  int64_t prefix_hit_blocks = 0;
  int64_t prefix_restored_blocks = 0;  // of the hits, copied back from an offload tier
  int64_t kv_spilled_blocks = 0;       // cached blocks handed to the offload tiers
  bool kv_offload = false;             // tiers configured: their series are rendered
  KvTierStats kv_tiers;
  bool speculative = false;  // a proposer is on: its series are rendered
  SpeculativeStats spec;
  // Mixtures of experts: tokens routed to each expert, summed over the layers (empty: dense).
  std::vector<int64_t> expert_tokens;
  Histogram ttft_seconds{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram inter_token_seconds{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};

  std::string render_prometheus() const;

 private:
  // ember_kv_offload_{ram,disk}_* series and the disk tier's faults.
  void render_kv_tiers(std::string& out) const;
};

}  // namespace ember
