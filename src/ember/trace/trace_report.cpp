#include "ember/trace/trace_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "ember/backend/kv_row_format.h"
#include "ember/core/bandwidth_probe.h"

namespace ember {

using nlohmann::ordered_json;

double kv_formula_bytes_per_token(const KvShape& kv) {
  return static_cast<double>(kv.n_layers * kv.n_kv_heads) *
         static_cast<double>(kv.k_row_bytes() + kv.v_row_bytes());
}

TraceMachine measure_trace_machine(Backend& backend, bool probe, int probe_mb) {
  TraceMachine m;
  const BackendInfo info = backend.info();
  m.backend = info.name;
  m.kernels = info.kernels;
  m.threads = info.threads;
  if (!probe) return m;
  std::fprintf(stderr, "[ember] trace: measuring the machine's bandwidth and compute peaks\n");
  BandwidthProbe bandwidth(static_cast<size_t>(probe_mb) << 20, /*huge_pages=*/true);
  m.read_gbps = bandwidth.measure(info.threads);
  m.peaks = backend.probe_compute();
  return m;
}

namespace {

// Probabilities and weights to 6 decimals in the JSON (a few characters each instead of a float's
// 9 digits: a 30-layer model's page stays a few MB); the recorder keeps them whole.
double round6(float v) {
  return std::round(double{v} * 1e6) / 1e6;
}
std::vector<double> rounded(const std::vector<float>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round6(v[i]);
  return r;
}

std::string token_text(const TraceContext& c, int32_t id) {
  return c.tokenizer != nullptr ? c.tokenizer->token_bytes(id) : std::to_string(id);
}

ordered_json model_json(const TraceRecorder& t, const TraceContext& c) {
  const ModelConfig& m = t.config();
  return {{"name", c.model_name},   {"architecture", m.architecture}, {"weights", c.weight_dtype},
          {"n_layers", m.n_layers}, {"n_heads", m.n_heads},           {"n_kv_heads", m.n_kv_heads},
          {"head_dim", m.head_dim}, {"d_model", m.d_model},           {"vocab_size", m.vocab_size}};
}

ordered_json machine_json(const TraceMachine& m) {
  ordered_json peaks = ordered_json::array();
  for (const ComputePeak& p : m.peaks) {
    peaks.push_back(
        {{"family", p.family}, {"ops_per_second", p.ops_per_second}, {"integer", p.integer}});
  }
  return {{"backend", m.backend},
          {"kernels", m.kernels},
          {"threads", m.threads},
          {"read_gbps", m.read_gbps},
          {"compute_peaks", peaks}};
}

ordered_json lens_json(const TraceRecorder& t) {
  ordered_json layers = ordered_json::array();
  for (size_t l = 0; l < t.lens().size(); ++l) {
    ordered_json cells = ordered_json::array();
    for (size_t position = 0; position < t.lens()[l].size(); ++position) {
      const LensCell& cell = t.lens()[l][position];
      if (cell.top.empty()) continue;  // not a selected position
      ordered_json top = ordered_json::array();
      for (const LensEntry& e : cell.top)
        top.push_back(ordered_json::array({e.token, round6(e.p)}));
      ordered_json j = {{"position", position}, {"top", top}};
      if (cell.next_rank >= 0) {
        j["next"] = cell.next_token;
        j["next_rank"] = cell.next_rank;
        j["next_p"] = round6(cell.next_p);
      }
      cells.push_back(std::move(j));
    }
    layers.push_back({{"layer", static_cast<int64_t>(l) - 1}, {"cells", cells}});
  }
  return {{"top_k", t.options().top_k}, {"enabled", t.options().logit_lens}, {"layers", layers}};
}

ordered_json attention_json(const TraceRecorder& t) {
  const ModelConfig& m = t.config();
  const int64_t group = m.n_heads / m.n_kv_heads;
  ordered_json layers = ordered_json::array();
  for (size_t l = 0; l < t.attention().size(); ++l) {
    ordered_json heads = ordered_json::array();
    for (size_t h = 0; h < t.attention()[l].size(); ++h) {
      ordered_json rows = ordered_json::array();
      for (const AttentionRow& r : t.attention()[l][h]) {
        rows.push_back({{"position", r.position},
                        {"first_key", r.first_key},
                        {"n_keys", r.n_keys},
                        {"bin_size", r.bin_size},
                        {"weights", rounded(r.weights)}});
      }
      heads.push_back({{"head", h}, {"kv_head", static_cast<int64_t>(h) / group}, {"rows", rows}});
    }
    layers.push_back({{"layer", l}, {"heads", heads}});
  }
  return {
      {"max_rows", t.options().max_rows}, {"max_keys", t.options().max_keys}, {"layers", layers}};
}

ordered_json residual_json(const TraceRecorder& t) {
  ordered_json layers = ordered_json::array();
  for (size_t l = 0; l < t.residuals().size(); ++l) {
    const ResidualStats& r = t.residuals()[l];
    ordered_json j = {{"layer", static_cast<int64_t>(l) - 1}, {"residual_norm", r.residual_norm}};
    if (l > 0) {
      j["attention_norm"] = r.attention_norm;
      j["mlp_norm"] = r.mlp_norm;
      j["cosine_to_previous"] = r.cosine_to_previous;
    }
    layers.push_back(std::move(j));
  }
  return {{"layers", layers}};
}

ordered_json kv_json(const TraceRecorder& t, const KvShape& kv) {
  const double per_token = kv_formula_bytes_per_token(kv);
  ordered_json steps = ordered_json::array();
  for (size_t i = 0; i < t.steps().size(); ++i) {
    const TraceStep& s = t.steps()[i];
    const int64_t tokens = s.first_position + s.n_tokens;
    steps.push_back({{"step", i},
                     {"tokens", tokens},
                     {"blocks_used", s.kv_blocks_used},
                     {"bytes_held", s.kv_bytes_held},
                     {"bytes_formula", per_token * static_cast<double>(tokens)},
                     {"prefix_hit_blocks", s.prefix_hit_blocks}});
  }
  return {{"dtype", kv.dtype_label()},
          {"block_size", kv.block_size},
          {"formula", "n_layers x n_kv_heads x head_dim x (K bytes + V bytes per value)"},
          {"bytes_per_token_formula", per_token},
          {"bytes_per_token", kv.bytes_per_token()},
          {"bytes_per_block", kv.bytes_per_block()},
          {"steps", steps}};
}

// Seconds, FLOPs and bytes with the rates they make.
ordered_json rates(double seconds, double flops, double bytes) {
  return {{"seconds", seconds},
          {"flops", flops},
          {"bytes", bytes},
          {"gflops", seconds > 0 ? flops / seconds * 1e-9 : 0.0},
          {"gbps", seconds > 0 ? bytes / seconds * 1e-9 : 0.0},
          {"flops_per_byte", bytes > 0 ? flops / bytes : 0.0}};
}

ordered_json roofline_json(const TraceRecorder& t) {
  ordered_json steps = ordered_json::array();
  struct Sum {
    double seconds = 0, flops = 0, bytes = 0, wall = 0;
    int64_t steps = 0, tokens = 0;
  } prefill, decode;
  for (size_t i = 0; i < t.steps().size(); ++i) {
    const TraceStep& s = t.steps()[i];
    double seconds = 0, flops = 0, bytes = 0;
    ordered_json ops = ordered_json::array();
    for (const TraceOp& o : s.ops) {
      seconds += o.seconds;
      flops += o.flops;
      bytes += o.bytes;
      ordered_json j = {{"group", op_group_name(o.group)}, {"name", o.name}, {"calls", o.calls}};
      j.update(rates(o.seconds, o.flops, o.bytes));
      ops.push_back(std::move(j));
    }
    const bool is_prefill = s.first_position < t.n_prompt();
    Sum& sum = is_prefill ? prefill : decode;
    sum.seconds += seconds;
    sum.flops += flops;
    sum.bytes += bytes;
    sum.wall += s.seconds;
    sum.steps += 1;
    sum.tokens += s.n_tokens;
    ordered_json j = {{"step", i},
                      {"phase", is_prefill ? "prefill" : "decode"},
                      {"first_position", s.first_position},
                      {"tokens", s.n_tokens},
                      {"batch_tokens", s.batch_tokens},
                      {"batch_sequences", s.batch_sequences},
                      {"wall_seconds", s.seconds}};
    j.update(rates(seconds, flops, bytes));
    j["ops"] = std::move(ops);
    steps.push_back(std::move(j));
  }
  ordered_json phases = ordered_json::object();
  for (auto [name, sum] : {std::pair<const char*, Sum>{"prefill", prefill}, {"decode", decode}}) {
    if (sum.steps == 0) continue;
    ordered_json j = {{"steps", sum.steps}, {"tokens", sum.tokens}, {"wall_seconds", sum.wall}};
    j.update(rates(sum.seconds, sum.flops, sum.bytes));
    phases[name] = std::move(j);
  }
  return {{"note",
           "seconds: the ops' wall time, summed (tracing's own work excluded; wall_seconds "
           "includes it); flops: 2 x rows x cols x tokens per matmul, 4 x head_dim per "
           "(query head, key) for attention; bytes: what each op reads and writes at least; a "
           "step's ops are its whole batch's (batch_tokens, batch_sequences: other requests' "
           "tokens included when the traced request shared its steps)"},
          {"phases", phases},
          {"steps", steps}};
}

}  // namespace

ordered_json trace_json(const TraceRecorder& t, const TraceContext& c) {
  ordered_json tokens = ordered_json::array();
  for (size_t i = 0; i < t.tokens().size(); ++i) {
    const int32_t id = t.tokens()[i];
    tokens.push_back({{"id", id},
                      {"text", token_text(c, id)},
                      {"prompt", static_cast<int64_t>(i) < t.n_prompt()}});
  }
  // The text of every token the lens names, for the page's labels.
  std::map<int32_t, std::string> named;
  for (const std::vector<LensCell>& layer : t.lens()) {
    for (const LensCell& cell : layer) {
      for (const LensEntry& e : cell.top) named.emplace(e.token, token_text(c, e.token));
      if (cell.next_token >= 0) named.emplace(cell.next_token, token_text(c, cell.next_token));
    }
  }
  ordered_json texts = ordered_json::object();
  for (const auto& [id, text] : named) texts[std::to_string(id)] = text;
  ordered_json j = {{"ember_trace", 1},
                    {"model", model_json(t, c)},
                    {"machine", machine_json(c.machine)},
                    {"n_prompt", t.n_prompt()},
                    {"tokens", tokens},
                    {"token_texts", texts},
                    {"logit_lens", lens_json(t)},
                    {"attention", attention_json(t)},
                    {"residual", residual_json(t)},
                    {"kv", kv_json(t, c.kv)},
                    {"roofline", roofline_json(t)}};
  if (!t.problem().empty()) j["problem"] = t.problem();
  return j;
}

}  // namespace ember
