// `ember inspect`: headers only — tensor table, architecture numbers, parameter counts per
// component, KV-cache bytes per token and for --ctx N x --batch B, the weights' bits per weight
// and, for GGUF files, the llama-quantize preset whose per-tensor types they have. No weight is
// read.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "ember/cli/commands.h"
#include "ember/cli/inspect_parallel_plan.h"
#include "ember/cli/inspect_plan.h"
#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/model/checkpoint.h"
#include "ember/model/quant_presets.h"
#include "ember/model/quantize_plan.h"
#include "ember/model/tensor_names.h"

namespace ember::cli {

namespace {

struct InspectOptions {
  ModelOptions model;
  int64_t ctx = 0;
  int64_t batch = 1;
  bool json = false;
  bool metadata = false;
  PlanOptions plan;
  ParallelOptions parallel;
};

struct TensorRow {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t numel = 0;
  TensorComponent component = TensorComponent::Other;
  uint64_t nbytes = 0;
};

// 1234567 -> "1,234,567" (built front to back: GCC 12 warns, falsely, on string::insert here).
std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v);
  const size_t first = v < 0 ? 1 : 0;  // after the sign
  std::string s = digits.substr(0, first);
  for (size_t i = first; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

// Headers only: a config without weight files is described as --dummy would build it.
Checkpoint open_headers(const InspectOptions& o) {
  namespace fs = std::filesystem;
  CheckpointOptions copts;
  copts.tokenizer_path = o.model.tokenizer;
  std::string path = o.model.model.empty() ? default_model_path() : o.model.model;
  bool has_weights = !fs::is_directory(path) || fs::exists(fs::path(path) / "model.safetensors") ||
                     fs::exists(fs::path(path) / "model.safetensors.index.json");
  copts.dummy = o.model.dummy || !has_weights || fs::path(path).extension() == ".json";
  return open_checkpoint(path, copts);
}

// The stored tensors, or for a config alone the tensors --dummy would build; in natural order.
std::vector<TensorRow> tensor_rows(const Checkpoint& ckpt, const InspectOptions& o) {
  std::vector<TensorRow> rows;
  if (ckpt.format == CheckpointFormat::ConfigOnly) {
    auto dtype = o.model.parsed_dtype();
    std::string dname = dtype                           ? dtype_name(*dtype)
                        : ckpt.torch_dtype == "float32" ? "f32"
                        : ckpt.torch_dtype == "float16" ? "f16"
                                                        : "bf16";
    for (const auto& e : expected_tensors(ckpt.config)) {
      TensorRow r{e.name, e.shape, e.is_matrix ? dname : "f32", 1, classify_tensor(e.name)};
      for (int64_t d : e.shape) r.numel *= d;
      const DType d = *dtype_from_name(r.dtype);
      r.nbytes = static_cast<uint64_t>(
          r.numel / e.shape.back() *
          dtype_row_bytes(dtype_fitting_row(d, e.shape.back(), DType::BF16), e.shape.back()));
      rows.push_back(r);
    }
  } else {
    for (const auto& t : ckpt.all_tensors) {
      rows.push_back({t.stored_name, t.view.shape, dtype_name(t.view.dtype), t.view.numel(),
                      classify_tensor(t.stored_name), t.view.nbytes});
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const TensorRow& a, const TensorRow& b) { return natural_less(a.name, b.name); });
  return rows;
}

// Parameter counts per component and KV-cache sizes, shared by the text and JSON outputs.
struct Totals {
  std::map<std::string, int64_t> params;  // by component_name
  int64_t total = 0;
  int64_t ctx = 0;
  std::map<std::string, int64_t> kv_per_token;  // bytes, by cache dtype
  uint64_t tensor_bytes = 0;
  // Mixtures of experts: the experts' parameters and bytes (every expert of every layer), and
  // what one token runs of the model: all but the experts it is not routed to.
  int64_t expert_params = 0;
  uint64_t expert_bytes = 0;
  int64_t active = 0;
  uint64_t active_tensor_bytes = 0;
  // GGUF files: the presets whose per-tensor types the file has (usually one; empty for none).
  std::vector<std::string> presets;
  double bits_per_weight() const {
    return total > 0 ? 8.0 * static_cast<double>(tensor_bytes) / static_cast<double>(total) : 0.0;
  }
};

std::vector<std::string> matching_preset_names(const Checkpoint& ckpt) {
  if (!ckpt.gguf) return {};
  std::vector<QuantTensorShape> shapes;
  std::vector<DType> types;
  for (const GgufTensorInfo& t : ckpt.gguf->tensors()) {
    shapes.push_back({t.name, t.shape});
    types.push_back(t.dtype);
  }
  QuantModelShape model;
  try {
    model = quant_model_shape(*ckpt.gguf);
  } catch (const Error&) {
    return {};  // no layer count: the layer rules cannot be applied
  }
  std::vector<std::string> names;
  for (QuantPreset p : matching_presets(shapes, types, model)) {
    names.push_back(quant_preset_info(p).name);
  }
  return names;
}

Totals compute_totals(const std::vector<TensorRow>& rows, const Checkpoint& ckpt,
                      const InspectOptions& o) {
  const ModelConfig& c = ckpt.config;
  Totals t;
  t.presets = matching_preset_names(ckpt);
  for (const auto& r : rows) {
    t.params[component_name(r.component)] += r.numel;
    t.total += r.numel;
    t.tensor_bytes += r.nbytes;
    // GGUF's ffn_{gate,up,down}_exps; HF's per-expert (...experts.N...) tensors.
    if (r.name.find("_exps.") != std::string::npos ||
        r.name.find(".experts.") != std::string::npos) {
      t.expert_params += r.numel;
      t.expert_bytes += r.nbytes;
    }
  }
  t.active = t.total;
  t.active_tensor_bytes = t.tensor_bytes;
  if (c.is_moe()) {
    const int64_t idle = c.n_experts - c.n_experts_used;
    t.active -= t.expert_params * idle / c.n_experts;
    t.active_tensor_bytes -=
        t.expert_bytes * static_cast<uint64_t>(idle) / static_cast<uint64_t>(c.n_experts);
  }
  t.ctx = o.ctx > 0 ? o.ctx : c.max_position_embeddings;
  // K and V, every layer: L x 2 x n_kv x head_dim elements per token.
  const int64_t kv_elems = c.n_layers * 2 * c.n_kv_heads * c.head_dim;
  t.kv_per_token = {{"f32", kv_elems * 4}, {"f16", kv_elems * 2}, {"bf16", kv_elems * 2}};
  return t;
}

void print_json(const Checkpoint& ckpt, const std::vector<TensorRow>& rows, const Totals& t,
                const InspectOptions& o, const nlohmann::ordered_json& plan) {
  const ModelConfig& c = ckpt.config;
  nlohmann::ordered_json j;
  j["path"] = ckpt.path;
  j["format"] = format_name(ckpt.format);
  j["architecture"] = {{"arch", c.architecture},
                       {"family", c.family()},
                       {"features", c.feature_summary()},
                       {"d_model", c.d_model},
                       {"d_ffn", c.d_ffn},
                       {"n_layers", c.n_layers},
                       {"n_heads", c.n_heads},
                       {"n_kv_heads", c.n_kv_heads},
                       {"head_dim", c.head_dim},
                       {"vocab_size", c.vocab_size},
                       {"rope_theta", c.rope_theta},
                       {"rms_norm_eps", c.rms_norm_eps},
                       {"max_position_embeddings", c.max_position_embeddings},
                       {"tie_word_embeddings", c.tie_word_embeddings},
                       {"attention_bias", c.attention_bias}};
  nlohmann::ordered_json p;
  for (const char* k : {"embeddings", "attention", "mlp", "norms", "lm_head", "other"}) {
    p[k] = t.params.count(k) ? t.params.at(k) : 0;
  }
  p["total"] = t.total;
  if (c.is_moe()) {
    p["experts"] = t.expert_params;
    p["active_per_token"] = t.active;
  }
  j["parameters"] = p;
  j["kv_cache"] = {{"bytes_per_token", t.kv_per_token},
                   {"ctx", t.ctx},
                   {"batch", o.batch},
                   {"bytes_for_ctx_batch",
                    {{"f32", t.kv_per_token.at("f32") * t.ctx * o.batch},
                     {"f16", t.kv_per_token.at("f16") * t.ctx * o.batch},
                     {"bf16", t.kv_per_token.at("bf16") * t.ctx * o.batch}}},
                   {"ember_cache_dtype", "f32"}};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    tensors.push_back(
        {{"name", r.name}, {"shape", r.shape}, {"dtype", r.dtype}, {"numel", r.numel}});
  }
  j["tensors"] = tensors;
  nlohmann::ordered_json quant = {{"tensor_bytes", t.tensor_bytes},
                                  {"bits_per_weight", t.bits_per_weight()}};
  quant["preset"] = t.presets.size() == 1 ? nlohmann::ordered_json(t.presets[0]) : nullptr;
  quant["matching_presets"] = t.presets;
  j["quantization"] = quant;
  if (!plan.is_null()) j["plan"] = plan;
  std::printf("%s\n", j.dump(2).c_str());
}

// "Q4_K_M", "Q4_K_S or Q4_K_M", or a note that none matches.
std::string preset_text(const std::vector<std::string>& presets) {
  if (presets.empty()) return "none (the per-tensor types match no llama-quantize preset)";
  std::string out;
  for (size_t i = 0; i < presets.size(); ++i) out += (i ? " or " : "") + presets[i];
  return out;
}

void print_text(const Checkpoint& ckpt, const std::vector<TensorRow>& rows, const Totals& t,
                const InspectOptions& o) {
  const ModelConfig& c = ckpt.config;
  std::printf("model:    %s\nformat:   %s%s\n", ckpt.path.c_str(), format_name(ckpt.format),
              ckpt.format == CheckpointFormat::ConfigOnly
                  ? " (--dummy: tensors implied by the config)"
                  : "");
  if (ckpt.gguf)
    std::printf("gguf:     v%u, %zu metadata keys\n", ckpt.gguf->version(),
                ckpt.gguf->metadata().size());
  std::printf("\n%-48s %-22s %-6s %14s\n", "tensor", "shape", "dtype", "elements");
  for (const auto& r : rows) {
    std::printf("%-48s %-22s %-6s %14s\n", r.name.c_str(), shape_to_string(r.shape).c_str(),
                r.dtype.c_str(), with_commas(r.numel).c_str());
  }
  std::printf("\narchitecture: %s (family %s)\n", c.architecture.c_str(), c.family());
  std::printf("  features: %s\n", c.feature_summary().c_str());
  std::printf("  d_model %lld, d_ffn %lld, layers %lld, heads %lld, kv heads %lld, head_dim %lld\n",
              (long long)c.d_model, (long long)c.d_ffn, (long long)c.n_layers, (long long)c.n_heads,
              (long long)c.n_kv_heads, (long long)c.head_dim);
  std::printf("  vocab %lld, rope theta %g, rms eps %g, max positions %lld, tied embeddings %s\n",
              (long long)c.vocab_size, c.rope_theta, c.rms_norm_eps,
              (long long)c.max_position_embeddings, c.tie_word_embeddings ? "yes" : "no");
  std::printf("\nweights:  %s bytes, %.2f bits per weight\n",
              with_commas(static_cast<int64_t>(t.tensor_bytes)).c_str(), t.bits_per_weight());
  if (ckpt.gguf) std::printf("preset:   %s\n", preset_text(t.presets).c_str());
  std::printf("\nparameters:\n");
  for (const char* k : {"embeddings", "attention", "mlp", "norms", "lm_head", "other"}) {
    if (t.params.count(k)) std::printf("  %-11s %16s\n", k, with_commas(t.params.at(k)).c_str());
  }
  std::printf("  %-11s %16s\n", "total", with_commas(t.total).c_str());
  if (c.is_moe()) {
    std::printf("  %-11s %16s  (%lld of %lld experts per token; experts hold %s of the total)\n",
                "active", with_commas(t.active).c_str(), (long long)c.n_experts_used,
                (long long)c.n_experts, with_commas(t.expert_params).c_str());
  }
  std::printf("\nKV cache (L x 2 x n_kv x head_dim x bytes):\n");
  for (const char* k : {"f32", "bf16"}) {
    std::printf("  %-4s %10s bytes/token, %16s bytes for ctx %lld x batch %lld\n", k,
                with_commas(t.kv_per_token.at(k)).c_str(),
                with_commas(t.kv_per_token.at(k) * t.ctx * o.batch).c_str(), (long long)t.ctx,
                (long long)o.batch);
  }
  std::printf("  (ember's cache stores f32 by default, f16 with --kv-dtype f16)\n");
  const ModelConfig& cw = ckpt.config;
  if (cw.sliding_window > 0 && cw.sliding_window_pattern <= 1 && cw.sliding_window < t.ctx) {
    // Blocks behind every layer's window go back to the pool: the window plus the block being
    // written and one a prompt chunk may reach into (16-token blocks).
    const int64_t resident = std::min<int64_t>(t.ctx, (cw.sliding_window + 15) / 16 * 16 + 32);
    std::printf(
        "  sliding window %lld on every layer: at most %lld positions resident per "
        "sequence, %s bytes (f32) for batch %lld\n",
        (long long)cw.sliding_window, (long long)resident,
        with_commas(t.kv_per_token.at("f32") * resident * o.batch).c_str(), (long long)o.batch);
  } else if (cw.sliding_window > 0) {
    // The sliding layers' K/V sits in a pool of its own whose passed blocks go back (the window,
    // the block being written and one a chunk may reach into); the global layers keep the context.
    const CapacityPlanInput in = capacity_input(cw, t.ctx, o.batch, DType::F32);
    const int64_t resident = std::min<int64_t>(t.ctx, (cw.sliding_window + 15) / 16 * 16 + 32);
    const int64_t per_layer = t.kv_per_token.at("f32") / std::max<int64_t>(1, cw.n_layers);
    const int64_t bytes = per_layer *
                          ((cw.n_layers - in.window_layers) * t.ctx + in.window_layers * resident) *
                          o.batch;
    std::printf(
        "  sliding window %lld on %lld of %lld layers, kept in a pool of their own: at most %lld "
        "positions resident there per sequence; the global layers keep the whole context: %s "
        "bytes (f32) for ctx %lld x batch %lld\n",
        (long long)cw.sliding_window, (long long)in.window_layers, (long long)cw.n_layers,
        (long long)resident, with_commas(bytes).c_str(), (long long)t.ctx, (long long)o.batch);
  }
  if (o.metadata && ckpt.gguf) {
    std::printf("\nmetadata:\n");
    for (const auto& [key, value] : ckpt.gguf->metadata()) {
      std::printf("  %-40s %s\n", key.c_str(), value.to_display().c_str());
    }
  }
}

// What a decode step reads: every tensor but the embedding tables (one row each), plus the token
// table again when it doubles as the lm_head.
int64_t decode_weight_bytes(const std::vector<TensorRow>& rows, const Totals& t,
                            const ModelConfig& c) {
  uint64_t embeddings = 0, largest_embedding = 0;
  for (const auto& r : rows) {
    if (r.component != TensorComponent::Embedding) continue;
    embeddings += r.nbytes;
    largest_embedding = std::max(largest_embedding, r.nbytes);  // the token table
  }
  // A mixture's token reads only its experts: active_tensor_bytes (tensor_bytes when dense).
  return static_cast<int64_t>(t.active_tensor_bytes - embeddings +
                              (c.tie_word_embeddings ? largest_embedding : 0));
}

// The parallel plan's input: the capacity plan's (memory and bandwidth are per rank), the bytes
// of each part of the model as the tensors list them, and --tp/--pp/--link/--bandwidth.
ParallelPlanInput parallel_input(const CapacityPlanInput& base, const ModelConfig& c,
                                 const std::vector<TensorRow>& rows, const ParallelOptions& o) {
  ParallelPlanInput in;
  in.model = base;
  in.d_model = c.d_model;
  in.d_ffn = c.is_moe() ? c.d_expert_ffn : c.d_ffn;
  in.vocab = c.vocab_size;
  in.tied_embeddings = c.tie_word_embeddings;
  in.qk_norm_across_ranks = c.qk_norm_whole;
  uint64_t embeddings = 0, token_table = 0;
  for (const TensorRow& r : rows) {
    const auto bytes = static_cast<int64_t>(r.nbytes);
    switch (r.component) {
      case TensorComponent::Attention:
      case TensorComponent::Mlp:
        in.layer_bytes += bytes;
        break;
      case TensorComponent::Norm:
        in.layer_norm_bytes += bytes;
        break;
      case TensorComponent::LmHead:
        in.lm_head_bytes += bytes;
        break;
      case TensorComponent::Embedding:
        embeddings += r.nbytes;
        token_table = std::max(token_table, r.nbytes);
        break;
      case TensorComponent::Other:
        in.other_bytes += bytes;
        break;
    }
  }
  in.embed_bytes = static_cast<int64_t>(token_table);
  in.other_bytes += static_cast<int64_t>(embeddings - token_table);  // GPT-2's positions
  in.tp = o.tp;
  in.pp = o.pp;
  in.link = parse_link(o.link);
  if (!o.bandwidth.empty())
    in.model.bandwidth_bytes_per_s = parse_bandwidth(o.bandwidth, "--bandwidth");
  return in;
}

int inspect_command(const InspectOptions& o) {
  if (o.parallel.wanted() && !o.plan.enabled) {
    throw Error::invalid_request("--tp", "--tp and --pp plan a split model: add --plan");
  }
  const Checkpoint ckpt = open_headers(o);
  const std::vector<TensorRow> rows = tensor_rows(ckpt, o);
  const Totals totals = compute_totals(rows, ckpt, o);
  std::optional<std::pair<CapacityPlanInput, CapacityPlan>> plan;
  std::optional<std::pair<ParallelPlanInput, ParallelPlan>> parallel;
  if (o.plan.enabled) {
    PlanOptions plan_options = o.plan;
    plan_options.bandwidth_given = !o.parallel.bandwidth.empty();
    if (plan_options.bandwidth_given) plan_options.probe = false;
    CapacityPlanInput in = plan_input(ckpt.config, static_cast<int64_t>(totals.tensor_bytes),
                                      decode_weight_bytes(rows, totals, ckpt.config), totals.ctx,
                                      o.batch, plan_options);
    if (o.parallel.wanted()) {
      const ParallelPlanInput pin = parallel_input(in, ckpt.config, rows, o.parallel);
      parallel.emplace(pin, plan_parallel(pin));
      in.bandwidth_bytes_per_s = pin.model.bandwidth_bytes_per_s;
    } else if (!o.parallel.bandwidth.empty()) {
      in.bandwidth_bytes_per_s = parse_bandwidth(o.parallel.bandwidth, "--bandwidth");
    }
    plan.emplace(in, plan_capacity(in));
  }
  if (o.json) {
    nlohmann::ordered_json plan_j = plan ? plan_json(plan->first, plan->second) : nullptr;
    if (parallel) plan_j["parallel"] = parallel_plan_json(parallel->first, parallel->second);
    print_json(ckpt, rows, totals, o, plan_j);
  } else {
    print_text(ckpt, rows, totals, o);
    if (plan) {
      PlanOptions shown = o.plan;
      shown.bandwidth_given = !o.parallel.bandwidth.empty();
      print_plan_text(plan->first, plan->second, shown);
    }
    if (parallel) print_parallel_plan_text(parallel->first, parallel->second);
  }
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Show a checkpoint's tensors, architecture, parameters and KV-cache size (headers only)");
  cmd->add_option("model", o->model.model,
                  "Model: HF directory, config.json, .gguf or llama2.c .bin");
  cmd->add_option("-m,--model", o->model.model, "Same as the positional argument");
  cmd->add_option("--tokenizer", o->model.tokenizer, "Tokenizer override (llama2.c)");
  cmd->add_option("--dtype", o->model.dtype, "With --dummy: dtype the matrices would have");
  cmd->add_flag("--dummy", o->model.dummy,
                "Describe the model a config implies (no weight files needed)");
  cmd->add_option("--ctx", o->ctx,
                  "Tokens per sequence for the KV-cache estimate (default: model max)");
  cmd->add_option("--batch", o->batch, "Sequences for the KV-cache estimate")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->add_flag("--metadata", o->metadata, "Also list GGUF metadata");
  cmd->add_flag("--plan", o->plan.enabled,
                "Capacity plan: weight and KV bytes for --ctx x --batch, sequences that fit in "
                "--mem, decode ceiling from the measured read bandwidth");
  cmd->add_option("--kv-dtype", o->plan.kv_dtype,
                  "KV cache dtype of the plan: f32, f16, bf16, "
                  "q8_0, q4_0")
      ->capture_default_str();
  cmd->add_option("--mem", o->plan.mem,
                  "Memory for weights + KV in the plan (e.g. 24GiB, 512MiB; default with --backend "
                  "cuda: the GPU's free memory)");
  cmd->add_option("--backend", o->plan.backend,
                  "Plan for this backend: cpu (host memory and bandwidth) or cuda (the GPU's "
                  "memory and measured HBM bandwidth)")
      ->capture_default_str();
  cmd->add_option("--device", o->plan.device, "With --backend cuda: which GPU")
      ->capture_default_str();
  cmd->add_flag("--no-probe{false}", o->plan.probe,
                "Plan without measuring the read bandwidth (no decode ceiling)");
  cmd->add_option("--bandwidth", o->parallel.bandwidth,
                  "Plan for this memory read bandwidth (per rank with --tp/--pp), e.g. 200GB/s, "
                  "instead of measuring this machine's");
  cmd->add_option("--tp", o->parallel.tp,
                  "With --plan: tensor-parallel ranks (heads and FFN rows split over them)")
      ->capture_default_str();
  cmd->add_option("--pp", o->parallel.pp,
                  "With --plan: pipeline stages (consecutive layers on each)")
      ->capture_default_str();
  cmd->add_option("--link", o->parallel.link,
                  "With --tp/--pp: the link between ranks, BANDWIDTH,LATENCY")
      ->capture_default_str();
  return [o] { return inspect_command(*o); };
}

}  // namespace ember::cli
