#include "ember/parallel/parallel_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "ember/core/error.h"

namespace ember {

namespace {

// A number followed by one of `units` (exact, case-sensitive); nullopt when it is not one.
std::optional<double> number_with_unit(const std::string& text,
                                       const std::vector<std::pair<std::string, double>>& units) {
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
    ++end;
  }
  if (end == 0) return std::nullopt;
  char* parsed = nullptr;
  const std::string digits = text.substr(0, end);
  const double value = std::strtod(digits.c_str(), &parsed);
  if (parsed != digits.c_str() + digits.size() || !std::isfinite(value) || value <= 0) {
    return std::nullopt;
  }
  const std::string unit = text.substr(end);
  for (const auto& [name, scale] : units) {
    if (unit == name) return value * scale;
  }
  return std::nullopt;
}

const std::vector<std::pair<std::string, double>> kBandwidthUnits = {
    {"B/s", 1.0},   {"KB/s", 1e3},     {"MB/s", 1e6},        {"GB/s", 1e9},
    {"TB/s", 1e12}, {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
};
const std::vector<std::pair<std::string, double>> kLatencyUnits = {
    {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};

// Ring all-reduce of `bytes` over n ranks: 2 (n - 1) steps, each moving bytes / n.
double all_reduce_seconds(double bytes, int n, const LinkSpec& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * bytes / link.bytes_per_s;
}

}  // namespace

double parse_bandwidth(const std::string& text, const std::string& option) {
  if (auto v = number_with_unit(text, kBandwidthUnits)) return *v;
  throw Error::invalid_request(option, option + " '" + text +
                                           "': expected a bandwidth like 25GB/s (B/s, KB/s, MB/s, "
                                           "GB/s, TB/s, KiB/s, MiB/s, GiB/s)");
}

LinkSpec parse_link(const std::string& text) {
  const size_t comma = text.find(',');
  const auto bad = [&] {
    return Error::invalid_request("--link", "--link '" + text +
                                                "': expected BANDWIDTH,LATENCY like 25GB/s,5us "
                                                "(latency in ns, us, ms or s)");
  };
  if (comma == std::string::npos) throw bad();
  const auto bandwidth = number_with_unit(text.substr(0, comma), kBandwidthUnits);
  const auto latency = number_with_unit(text.substr(comma + 1), kLatencyUnits);
  if (!bandwidth || !latency) throw bad();
  return {*bandwidth, *latency};
}

void check_parallel_shape(const ParallelPlanInput& in) {
  const CapacityPlanInput& m = in.model;
  const auto refuse = [](const char* option, const std::string& why) {
    throw Error::invalid_request(option, why);
  };
  if (in.tp < 1) refuse("--tp", "--tp must be at least 1");
  if (in.pp < 1) refuse("--pp", "--pp must be at least 1");
  const std::string tp = "--tp " + std::to_string(in.tp);
  if (m.n_heads % in.tp != 0) {
    refuse("--tp", tp + " does not divide the " + std::to_string(m.n_heads) + " attention heads");
  }
  if (in.d_ffn % in.tp != 0) {
    refuse("--tp", tp + " does not divide the " + std::to_string(in.d_ffn) + " FFN rows");
  }
  if (m.n_kv_heads % in.tp != 0 && in.tp % m.n_kv_heads != 0) {
    refuse("--tp", tp + " neither divides the " + std::to_string(m.n_kv_heads) +
                       " KV heads nor is a multiple of them");
  }
  if (in.pp > m.n_layers) {
    refuse("--pp", "--pp " + std::to_string(in.pp) + " is more stages than the " +
                       std::to_string(m.n_layers) + " layers");
  }
}

ParallelPlan plan_parallel(const ParallelPlanInput& in) {
  check_parallel_shape(in);
  const CapacityPlanInput& m = in.model;
  const CapacityPlan whole = plan_capacity(m);
  ParallelPlan p;
  p.kv_heads_per_rank = std::max<int64_t>(1, m.n_kv_heads / in.tp);
  p.kv_heads_replicated = in.tp > m.n_kv_heads;
  p.all_reduce_bytes_per_token = static_cast<double>(in.d_model) * 4.0;
  p.handoff_bytes_per_token = in.pp > 1 ? static_cast<double>(in.d_model) * 4.0 : 0.0;
  const double tp = in.tp, L = static_cast<double>(m.n_layers);
  const double kv_share = static_cast<double>(p.kv_heads_per_rank) / m.n_kv_heads;
  const double lm_bytes =
      static_cast<double>(in.tied_embeddings ? in.embed_bytes : in.lm_head_bytes);
  std::vector<double> read_bytes;  // what a decode step streams, per rank of each stage
  int64_t first = 0;
  for (int s = 0; s < in.pp; ++s) {
    StagePlan st;
    st.first_layer = first;
    st.n_layers = m.n_layers / in.pp + (s < m.n_layers % in.pp ? 1 : 0);
    first += st.n_layers;
    const bool head = s == 0, tail = s == in.pp - 1;
    const double layers = static_cast<double>(st.n_layers) / L;
    const double body = static_cast<double>(in.layer_bytes) * layers / tp +
                        static_cast<double>(in.layer_norm_bytes) * layers;
    st.weight_bytes_per_rank = body;
    if (head) st.weight_bytes_per_rank += static_cast<double>(in.embed_bytes) / tp + in.other_bytes;
    // A tied table serves as lm_head too: the last stage needs its own copy when it is not the
    // first.
    if (tail && (!in.tied_embeddings || !head)) st.weight_bytes_per_rank += lm_bytes / tp;
    read_bytes.push_back(body + (tail ? lm_bytes / tp : 0.0));
    st.kv_bytes_per_token_per_rank = whole.kv_bytes_per_token * layers * kv_share;
    st.kv_bytes_per_sequence_per_rank =
        st.kv_bytes_per_token_per_rank * static_cast<double>(whole.resident_tokens);
    st.all_reduces_per_step = in.tp > 1 ? (in.qk_norm_across_ranks ? 3 : 2) * st.n_layers : 0;
    p.all_reduces_per_step += st.all_reduces_per_step;
    if (m.memory_bytes) {
      const double left = static_cast<double>(*m.memory_bytes) - st.weight_bytes_per_rank;
      const auto fit = static_cast<int64_t>(
          std::floor(std::max(0.0, left) / std::max(1.0, st.kv_bytes_per_sequence_per_rank)));
      p.sequences_that_fit = p.sequences_that_fit ? std::min(*p.sequences_that_fit, fit) : fit;
    }
    p.stages.push_back(st);
  }
  // The sublayer outputs' all-reduces carry d_model floats per token, the norms' 2.
  const double norm_bytes = 2.0 * 4.0;
  const auto sums_per_step = [&](const StagePlan& st) {
    return in.qk_norm_across_ranks ? st.n_layers : int64_t{0};
  };
  const double ring = in.tp > 1 ? 2.0 * (tp - 1) / tp : 0.0;
  const StagePlan& front = p.stages.front();
  p.sent_bytes_per_token_per_rank =
      ring * (static_cast<double>(2 * front.n_layers) * p.all_reduce_bytes_per_token +
              static_cast<double>(sums_per_step(front)) * norm_bytes) +
      p.handoff_bytes_per_token;
  if (!m.bandwidth_bytes_per_s) return p;

  // One stage's step for m sequences: memory, all-reduces, the hand-off to the next stage, and
  // on the last stage the logits: gathered over its tp ranks (each holds vocab / tp of every row),
  // then sent by its first rank to every rank of the earlier stages, one after another.
  const double bw = *m.bandwidth_bytes_per_s;
  const LinkSpec& link = in.link;
  const double logits_bytes_per_sequence = 4.0 * static_cast<double>(in.vocab);
  const double earlier_ranks = static_cast<double>((in.pp - 1) * in.tp);
  auto stage_seconds = [&](int s, double seqs, double* comm) {
    const StagePlan& st = p.stages[static_cast<size_t>(s)];
    const double memory =
        (read_bytes[static_cast<size_t>(s)] + seqs * st.kv_bytes_per_sequence_per_rank) / bw;
    const auto sums = static_cast<double>(sums_per_step(st));
    double c = (static_cast<double>(st.all_reduces_per_step) - sums) *
                   all_reduce_seconds(seqs * p.all_reduce_bytes_per_token, in.tp, link) +
               sums * all_reduce_seconds(seqs * norm_bytes, in.tp, link);
    if (s == in.pp - 1 && in.tp > 1) {
      c += (tp - 1) * link.latency_s +
           (tp - 1) / tp * seqs * logits_bytes_per_sequence / link.bytes_per_s;
    }
    if (s == in.pp - 1) {
      c += earlier_ranks * (link.latency_s + seqs * logits_bytes_per_sequence / link.bytes_per_s);
    }
    if (s != in.pp - 1) c += link.latency_s + seqs * p.handoff_bytes_per_token / link.bytes_per_s;
    if (comm) *comm += c;
    return memory + c;
  };
  double step = 0, comm = 0;
  for (int s = 0; s < in.pp; ++s) {
    p.stages[static_cast<size_t>(s)].step_seconds_batch1 = stage_seconds(s, 1.0, nullptr);
    step += stage_seconds(s, 1.0, &comm);
  }
  p.decode_tokens_per_s_batch1 = 1.0 / step;
  p.comm_share_batch1 = comm / step;
  const double B = static_cast<double>(m.batch);
  const double micro = std::ceil(B / in.pp);
  double slowest = 0;
  for (int s = 0; s < in.pp; ++s) slowest = std::max(slowest, stage_seconds(s, micro, nullptr));
  p.decode_tokens_per_s_batch = in.pp > 1 ? B / (in.pp * slowest) : B / slowest;
  return p;
}

}  // namespace ember
