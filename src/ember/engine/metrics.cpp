#include "ember/engine/metrics.h"

#include <cstdio>
#include <string>

namespace ember {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += value;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out,
                       const std::string& labels) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string pre = labels.empty() ? "" : labels + ",";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  char buf[256];
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::snprintf(buf, sizeof buf, "%s_bucket{%sle=\"%g\"} %llu\n", name.c_str(), pre.c_str(),
                  bounds_[i], static_cast<unsigned long long>(cumulative));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%s_bucket{%sle=\"+Inf\"} %llu\n", name.c_str(), pre.c_str(),
                static_cast<unsigned long long>(count_));
  out += buf;
  std::snprintf(buf, sizeof buf, "%s_sum%s %.9g\n%s_count%s %llu\n", name.c_str(), own.c_str(),
                sum_, name.c_str(), own.c_str(), static_cast<unsigned long long>(count_));
  out += buf;
}

namespace {

void append_metric(std::string& out, const std::string& name, const char* type,
                   const std::string& help, double value) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name.c_str(),
                help.c_str(), name.c_str(), type, name.c_str(), value);
  out += buf;
}

}  // namespace

void ServingMetrics::render_kv_tiers(std::string& out) const {
  append_metric(out, "ember_prefix_cache_restored_blocks_total", "counter",
                "Prefix blocks copied back from an offload tier instead of recomputed",
                static_cast<double>(prefix_restored_blocks));
  append_metric(out, "ember_kv_offload_spilled_blocks_total", "counter",
                "Cached KV blocks handed to the offload tiers as they left the pool",
                static_cast<double>(kv_spilled_blocks));
  for (const auto& [tier, c] : {std::pair<std::string, const KvTierCounters&>{"ram", kv_tiers.ram},
                                {"disk", kv_tiers.disk}}) {
    const std::string p = "ember_kv_offload_" + tier + "_";
    append_metric(out, p + "hits_total", "counter", "Blocks found in the " + tier + " tier",
                  static_cast<double>(c.hits));
    append_metric(out, p + "misses_total", "counter", "Lookups the " + tier + " tier missed",
                  static_cast<double>(c.misses));
    append_metric(out, p + "read_bytes_total", "counter",
                  "Bytes restored from the " + tier + " tier", static_cast<double>(c.bytes_read));
    append_metric(out, p + "written_bytes_total", "counter",
                  "Bytes written to the " + tier + " tier", static_cast<double>(c.bytes_written));
    append_metric(out, p + "read_seconds_total", "counter",
                  "Time spent reading from the " + tier + " tier", c.read_seconds);
    append_metric(out, p + "write_seconds_total", "counter",
                  "Time spent writing to the " + tier + " tier", c.write_seconds);
    append_metric(out, p + "entries", "gauge", "Blocks held by the " + tier + " tier",
                  static_cast<double>(c.entries));
    append_metric(out, p + "bytes", "gauge", "Bytes held by the " + tier + " tier",
                  static_cast<double>(c.bytes));
  }
  append_metric(out, "ember_kv_offload_disk_rejected_total", "counter",
                "Disk tier files found corrupt, truncated or foreign (deleted, never used)",
                static_cast<double>(kv_tiers.disk_rejected));
  append_metric(out, "ember_kv_offload_disk_write_failures_total", "counter",
                "Disk tier writes that failed (the tier turns off at the first)",
                static_cast<double>(kv_tiers.disk_write_failures));
  append_metric(out, "ember_kv_offload_disk_enabled", "gauge", "1 while the disk tier is in use",
                kv_tiers.disk_enabled ? 1.0 : 0.0);
}

std::string ServingMetrics::render_prometheus() const {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
                  name, value);
    out += buf;
  };
  metric("ember_requests_total", "counter", "Requests accepted",
         static_cast<double>(requests_total));
  metric("ember_requests_finished_total", "counter", "Requests finished (any reason)",
         static_cast<double>(requests_finished));
  metric("ember_requests_cancelled_total", "counter",
         "Requests cancelled (client gone or shutdown)", static_cast<double>(requests_cancelled));
  metric("ember_requests_rejected_total", "counter", "Requests refused because the queue was full",
         static_cast<double>(requests_rejected));
  metric("ember_prompt_tokens_total", "counter", "Prompt tokens received",
         static_cast<double>(prompt_tokens_total));
  metric("ember_generation_tokens_total", "counter", "Tokens generated",
         static_cast<double>(generation_tokens_total));
  metric("ember_preemptions_total", "counter", "Sequences preempted for lack of KV blocks",
         static_cast<double>(preemptions_total));
  metric("ember_engine_steps_total", "counter", "Forward steps run",
         static_cast<double>(steps_total));
  metric("ember_sequences_running", "gauge", "Sequences in the running batch",
         static_cast<double>(running));
  metric("ember_sequences_waiting", "gauge", "Sequences waiting to be scheduled",
         static_cast<double>(waiting));
  metric("ember_kv_blocks_total", "gauge", "KV cache blocks in the pool",
         static_cast<double>(kv_blocks_total));
  metric("ember_kv_blocks_used", "gauge", "KV blocks referenced by sequences",
         static_cast<double>(kv_blocks_used));
  metric("ember_kv_blocks_free", "gauge", "KV blocks free and holding nothing cached",
         static_cast<double>(kv_blocks_free));
  metric("ember_kv_blocks_cached", "gauge", "KV blocks free but holding a cached prefix",
         static_cast<double>(kv_blocks_cached));
  metric("ember_kv_side_bytes", "gauge",
         "Bytes the KV cache holds beside its blocks (a per-channel q4_0 K cache's exact rows of "
         "the blocks being written)",
         static_cast<double>(kv_side_bytes));
  if (kv_window_pool) {
    metric("ember_kv_window_blocks_total", "gauge",
           "KV blocks in the sliding-window layers' own pool (Gemma 2/3)",
           static_cast<double>(kv_window_blocks_total));
    metric("ember_kv_window_blocks_used", "gauge", "Window-pool blocks referenced by sequences",
           static_cast<double>(kv_window_blocks_used));
    metric("ember_kv_window_blocks_free", "gauge",
           "Window-pool blocks free and holding nothing cached",
           static_cast<double>(kv_window_blocks_free));
    metric("ember_kv_window_blocks_cached", "gauge",
           "Window-pool blocks free but holding a cached prefix's window",
           static_cast<double>(kv_window_blocks_cached));
  }
  metric("ember_prefix_cache_queried_blocks_total", "counter",
         "Full prompt blocks looked up in the prefix cache",
         static_cast<double>(prefix_queried_blocks));
  metric("ember_prefix_cache_hit_blocks_total", "counter",
         "Full prompt blocks found in the prefix cache", static_cast<double>(prefix_hit_blocks));
  metric("ember_prefix_cache_hit_rate", "gauge", "Hit blocks / queried blocks",
         prefix_queried_blocks > 0
             ? static_cast<double>(prefix_hit_blocks) / static_cast<double>(prefix_queried_blocks)
             : 0.0);
  if (kv_offload) render_kv_tiers(out);
  if (speculative) {
    append_metric(out, "ember_spec_verify_steps_total", "counter",
                  "Sequence-steps that verified speculative guesses",
                  static_cast<double>(spec.verify_steps));
    append_metric(out, "ember_spec_steps_without_guesses_total", "counter",
                  "Decode sequence-steps of speculating requests that carried no guess (no "
                  "match, backing off after misses, or no room)",
                  static_cast<double>(spec.steps_without_guesses()));
    append_metric(out, "ember_spec_draft_tokens_total", "counter", "Speculative guesses fed",
                  static_cast<double>(spec.drafted));
    append_metric(out, "ember_spec_accepted_tokens_total", "counter", "Speculative guesses kept",
                  static_cast<double>(spec.accepted));
    append_metric(out, "ember_spec_acceptance_rate", "gauge", "Kept / fed guesses",
                  spec.acceptance_rate());
    append_metric(out, "ember_spec_mean_accepted_length", "gauge",
                  "Tokens emitted per verifying sequence-step (kept guesses + 1)",
                  spec.mean_accepted_length());
    append_metric(out, "ember_spec_propose_seconds_total", "counter", "Time spent proposing",
                  spec.propose_seconds);
    append_metric(out, "ember_spec_verify_seconds_total", "counter",
                  "Forward time of the steps that carried guesses", spec.verify_seconds);
  }
  if (!expert_tokens.empty()) {
    out +=
        "# HELP ember_expert_routed_tokens_total Tokens routed to each expert (mixtures of "
        "experts), summed over the layers\n# TYPE ember_expert_routed_tokens_total counter\n";
    for (size_t e = 0; e < expert_tokens.size(); ++e) {
      out += "ember_expert_routed_tokens_total{expert=\"" + std::to_string(e) + "\"} " +
             std::to_string(expert_tokens[e]) + "\n";
    }
  }
  ttft_seconds.render("ember_time_to_first_token_seconds", "Time from arrival to first token", out);
  inter_token_seconds.render("ember_inter_token_latency_seconds",
                             "Time between consecutive tokens of a request", out);
  return out;
}

}  // namespace ember
