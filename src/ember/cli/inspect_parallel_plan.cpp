#include "ember/cli/inspect_parallel_plan.h"

#include <cstdio>

namespace ember::cli {

namespace {

std::string per_second(double bytes_per_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB/s", bytes_per_s / 1e9);
  return text;
}

std::string micros(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  return text;
}

}  // namespace

void print_parallel_plan_text(const ParallelPlanInput& in, const ParallelPlan& p) {
  const CapacityPlanInput& m = in.model;
  std::printf("\nparallel plan (tp %d x pp %d = %d ranks; link %s, %s latency):\n", in.tp, in.pp,
              in.tp * in.pp, per_second(in.link.bytes_per_s).c_str(),
              micros(in.link.latency_s).c_str());
  std::printf(
      "  KV heads per rank    %lld of %lld%s\n", (long long)p.kv_heads_per_rank,
      (long long)m.n_kv_heads,
      p.kv_heads_replicated ? " (tp exceeds the KV heads: each is held by several ranks)" : "");
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const StagePlan& st = p.stages[s];
    std::printf(
        "  stage %zu (layers %lld-%lld): per rank weights %s, KV %s per token, %s per sequence "
        "of %lld tokens (x%lld: %s)\n",
        s, (long long)st.first_layer, (long long)(st.first_layer + st.n_layers - 1),
        format_bytes(st.weight_bytes_per_rank).c_str(),
        format_bytes(st.kv_bytes_per_token_per_rank).c_str(),
        format_bytes(st.kv_bytes_per_sequence_per_rank).c_str(), (long long)m.ctx,
        (long long)m.batch,
        format_bytes(st.kv_bytes_per_sequence_per_rank * static_cast<double>(m.batch)).c_str());
  }
  std::printf("  per decode step      %lld all-reduces of %s per token (2 per layer)",
              (long long)p.all_reduces_per_step,
              format_bytes(p.all_reduce_bytes_per_token).c_str());
  if (in.pp > 1) {
    std::printf(", %d stage hand-offs of %s per token", in.pp - 1,
                format_bytes(p.handoff_bytes_per_token).c_str());
  }
  std::printf("; a rank sends %s per token\n",
              format_bytes(p.sent_bytes_per_token_per_rank).c_str());
  if (p.sequences_that_fit) {
    std::printf("  memory %s per rank: %lld sequences of %lld tokens fit\n",
                format_bytes(static_cast<double>(*m.memory_bytes)).c_str(),
                (long long)*p.sequences_that_fit, (long long)m.ctx);
  }
  if (p.decode_tokens_per_s_batch1) {
    std::printf(
        "  predicted decode     %.1f tok/s at batch 1 (communication %.0f%% of a step), %.1f "
        "tok/s in total at batch %lld (each rank reading at %s)\n",
        *p.decode_tokens_per_s_batch1, 100.0 * *p.comm_share_batch1, *p.decode_tokens_per_s_batch,
        (long long)m.batch, per_second(*m.bandwidth_bytes_per_s).c_str());
  }
}

nlohmann::ordered_json parallel_plan_json(const ParallelPlanInput& in, const ParallelPlan& p) {
  using J = nlohmann::ordered_json;
  J j;
  j["tp"] = in.tp;
  j["pp"] = in.pp;
  j["link_bytes_per_s"] = in.link.bytes_per_s;
  j["link_latency_s"] = in.link.latency_s;
  j["kv_heads_per_rank"] = p.kv_heads_per_rank;
  j["kv_heads_replicated"] = p.kv_heads_replicated;
  J stages = J::array();
  for (const StagePlan& st : p.stages) {
    stages.push_back({{"first_layer", st.first_layer},
                      {"layers", st.n_layers},
                      {"weight_bytes_per_rank", st.weight_bytes_per_rank},
                      {"kv_bytes_per_token_per_rank", st.kv_bytes_per_token_per_rank},
                      {"kv_bytes_per_sequence_per_rank", st.kv_bytes_per_sequence_per_rank},
                      {"all_reduces_per_step", st.all_reduces_per_step},
                      {"step_seconds_batch1", st.step_seconds_batch1}});
  }
  j["stages"] = stages;
  j["all_reduces_per_step"] = p.all_reduces_per_step;
  j["all_reduce_bytes_per_token"] = p.all_reduce_bytes_per_token;
  j["handoff_bytes_per_token"] = p.handoff_bytes_per_token;
  j["sent_bytes_per_token_per_rank"] = p.sent_bytes_per_token_per_rank;
  j["sequences_that_fit"] = p.sequences_that_fit ? J(*p.sequences_that_fit) : J(nullptr);
  j["bandwidth_bytes_per_s"] =
      in.model.bandwidth_bytes_per_s ? J(*in.model.bandwidth_bytes_per_s) : J(nullptr);
  j["decode_tokens_per_s_batch1"] =
      p.decode_tokens_per_s_batch1 ? J(*p.decode_tokens_per_s_batch1) : J(nullptr);
  j["decode_tokens_per_s_batch"] =
      p.decode_tokens_per_s_batch ? J(*p.decode_tokens_per_s_batch) : J(nullptr);
  j["comm_share_batch1"] = p.comm_share_batch1 ? J(*p.comm_share_batch1) : J(nullptr);
  return j;
}

}  // namespace ember::cli
