#include "ember/server/vllm_metrics.h"

#include <cstdio>

namespace ember::server {

std::string render_vllm_metrics(const ServingMetrics& m, const std::string& model_name) {
  std::string label = "model_name=\"";
  for (char c : model_name) {  // Prometheus label escaping
    if (c == '"' || c == '\\') label += '\\';
    label += c == '\n' ? 'n' : c;
  }
  label += "\"";
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name,
                  type, name, label.c_str(), value);
    out += buf;
  };
  const double kv_usage = m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) /
                                                      static_cast<double>(m.kv_blocks_total)
                                                : 0.0;
  metric("vllm:num_requests_running", "gauge",
         "Requests in the running batch (ember_sequences_running)", static_cast<double>(m.running));
  metric("vllm:num_requests_waiting", "gauge", "Requests waiting (ember_sequences_waiting)",
         static_cast<double>(m.waiting));
  metric("vllm:gpu_cache_usage_perc", "gauge",
         "KV-cache usage, 1 = full (ember_kv_blocks_used / total)", kv_usage);
  metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = full (vLLM v1 name)", kv_usage);
  metric("vllm:prompt_tokens_total", "counter",
         "Prefill tokens processed (ember_prompt_tokens_total)",
         static_cast<double>(m.prompt_tokens_total));
  metric("vllm:generation_tokens_total", "counter",
         "Generation tokens (ember_generation_tokens_total)",
         static_cast<double>(m.generation_tokens_total));
  metric("vllm:num_preemptions_total", "counter", "Preemptions (ember_preemptions_total)",
         static_cast<double>(m.preemptions_total));
  metric("vllm:request_success_total", "counter",
         "Finished requests (ember_requests_finished_total)",
         static_cast<double>(m.requests_finished));
  metric("vllm:gpu_prefix_cache_hit_rate", "gauge", "Prefix-cache hit rate, by blocks",
         m.prefix_queried_blocks > 0 ? static_cast<double>(m.prefix_hit_blocks) /
                                           static_cast<double>(m.prefix_queried_blocks)
                                     : 0.0);
  m.ttft_seconds.render("vllm:time_to_first_token_seconds", "Time to first token", out, label);
  m.inter_token_seconds.render("vllm:time_per_output_token_seconds", "Time per output token", out,
                               label);
  return out;
}

}  // namespace ember::server
