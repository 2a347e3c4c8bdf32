// `ember bench`: like llama-bench. pp: one P-token prompt in a single forward step (tok/s);
// tg: B sequences decoding N tokens together, one step per token (aggregate tok/s).
// Median and spread over repetitions, after a warm-up that is not counted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "ember/cli/commands.h"
#include "ember/core/bandwidth_probe.h"
#include "ember/core/error.h"
#include "ember/core/huge_pages.h"
#include "ember/engine/engine.h"
#include "ember/engine/sampler.h"

namespace ember::cli {

namespace {

struct BenchOptions {
  ModelOptions model;
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int64_t batch = 1;
  int repetitions = 3;
  int64_t decode_context = 0;  // prompt tokens each decoding sequence starts from
  int64_t prefix_tokens = 0;   // > 0: also time a prefix-cache hit on a prompt this long
  bool probe = false;          // run a read-bandwidth probe before each tg repetition
  int64_t probe_mb = 1024;     // its buffer
  bool json = false;
};

struct Summary {
  double median = 0, min = 0, max = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One prefill of `n` random tokens; returns seconds.
double time_prefill(Engine& engine, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(engine.vocab_size() - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = pick(rng);
  Sequence seq;
  double start = now_seconds();
  engine.feed(seq, tokens);
  double elapsed = now_seconds() - start;
  engine.release(seq);
  return elapsed;
}

// B sequences, each started from a `context`-token prompt (prefilled together, untimed), then n
// decode steps of B tokens (greedy); seconds.
double time_decode(Engine& engine, int64_t batch, int64_t n, int64_t context, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(engine.vocab_size() - 1));
  std::vector<Sequence> seqs(static_cast<size_t>(batch));
  std::vector<int32_t> next(static_cast<size_t>(batch));
  for (auto& t : next) t = pick(rng);
  std::vector<FeedRequest> requests(static_cast<size_t>(batch));
  const int64_t V = engine.vocab_size();
  if (context > 0) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < context; ++i) prompts[b].push_back(pick(rng));
      requests[b] = {&seqs[b], prompts[b], false, false};
    }
    engine.feed(requests);
  }
  auto step = [&] {
    for (int64_t b = 0; b < batch; ++b) {
      requests[b] = {&seqs[b], std::span<const int32_t>(&next[b], 1), false};
    }
    std::span<const float> logits = engine.feed(requests);
    for (int64_t b = 0; b < batch; ++b) next[b] = argmax(logits.subspan(b * V, V));
  };
  step();  // each sequence's first token: not timed, it only opens the context
  double start = now_seconds();
  for (int64_t i = 0; i < n; ++i) step();
  double elapsed = now_seconds() - start;
  for (auto& s : seqs) engine.release(s);
  return elapsed;
}

// Time to first token for a cold P-token prompt, then for a second request sharing all of it
// (prefix cache on): returns {cold seconds, warm seconds, cached tokens}.
struct PrefixResult {
  double cold = 0, warm = 0;
  int64_t cached = 0;
};
PrefixResult time_prefix_hit(const ModelWeights& weights, const EngineOptions& base, int64_t n,
                             std::mt19937& rng) {
  EngineOptions eo = base;
  eo.prefix_caching = true;
  eo.max_context = std::max<int64_t>(eo.max_context, n + 1);
  Engine engine(weights, eo);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(engine.vocab_size() - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (auto& t : prompt) t = pick(rng);
  auto first_token = [&](Sequence& seq) {
    double start = now_seconds();
    int64_t cached = engine.attach_cached_prefix(seq, prompt);
    argmax(engine.feed(seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cached))));
    return std::pair<double, int64_t>(now_seconds() - start, cached);
  };
  Sequence cold, warm;
  PrefixResult r;
  r.cold = first_token(cold).first;
  engine.release(cold);
  std::tie(r.warm, r.cached) = first_token(warm);
  engine.release(warm);
  return r;
}

int bench_command(const BenchOptions& o) {
  if (o.prompt_tokens < 0 || o.gen_tokens < 0 || o.batch < 1 || o.repetitions < 1) {
    throw Error("bench: -p and -n must be >= 0, --batch and -r >= 1");
  }
  if (o.probe_mb < 1) throw Error("bench: --probe-mb must be >= 1");
  LoadedModel model = load_model(o.model.load_options(/*need_tokenizer=*/false));
  EngineOptions eo;
  eo.kv_dtype = o.model.parsed_kv_dtype();
  eo.max_context = std::max<int64_t>({o.prompt_tokens, o.decode_context + o.gen_tokens + 1, 16});
  eo.max_sequences = o.batch;
  Engine engine(model.weights, eo);
  std::mt19937 rng(42);

  // Warm-up: touch every weight page and the KV pool once.
  time_prefill(engine, std::min<int64_t>(16, eo.max_context), rng);
  if (o.gen_tokens > 0) time_decode(engine, o.batch, std::min<int64_t>(4, o.gen_tokens), 0, rng);

  // --probe: the read-bandwidth ceiling, measured just before each decode repetition (the machine's
  // bandwidth drifts, so each repetition is set against its own figure). Its pages are those most
  // of the weights sit in: 2 MiB when ember copied them at load, else the file's 4 KiB.
  std::unique_ptr<BandwidthProbe> probe;
  const int64_t matrix_bytes = model.weights.matrix_bytes();
  if (o.probe && o.gen_tokens > 0) {
    const bool huge = 2 * model.weights.copied_matrix_bytes() > matrix_bytes;  // mostly copied
    probe = std::make_unique<BandwidthProbe>(static_cast<size_t>(o.probe_mb) << 20, huge);
    probe->measure(engine.n_threads());  // warm-up pass
  }
  std::vector<double> pp, tg, probe_gbps, decode_fraction;
  for (int r = 0; r < o.repetitions; ++r) {
    if (o.prompt_tokens > 0)
      pp.push_back(o.prompt_tokens / time_prefill(engine, o.prompt_tokens, rng));
    if (o.gen_tokens > 0) {
      if (probe) {
        // Median of 3 passes: one pass is ~40 ms and single passes swing.
        std::vector<double> passes;
        for (int i = 0; i < 3; ++i) passes.push_back(probe->measure(engine.n_threads()));
        probe_gbps.push_back(summarize(passes).median);
      }
      tg.push_back(static_cast<double>(o.batch * o.gen_tokens) /
                   time_decode(engine, o.batch, o.gen_tokens, o.decode_context, rng));
      if (probe) {
        // A decode step reads every matrix once for the whole batch.
        const double step_gbps =
            tg.back() / static_cast<double>(o.batch) * static_cast<double>(matrix_bytes) / 1e9;
        decode_fraction.push_back(step_gbps / probe_gbps.back());
      }
    }
  }
  Summary pps = summarize(pp), tgs = summarize(tg);
  Summary probes = summarize(probe_gbps), fractions = summarize(decode_fraction);
  const size_t probe_huge_bytes = probe ? huge_page_backed_bytes(probe->data(), probe->bytes()) : 0;
  const int64_t copied_bytes = model.weights.copied_matrix_bytes();
  const BackendInfo backend = model.weights.backend->info();
  const auto huge_weight_bytes = static_cast<size_t>(backend.weight_bytes_huge_pages);
  const double decode_gbps =
      tgs.median / static_cast<double>(o.batch) * static_cast<double>(matrix_bytes) / 1e9;
  PrefixResult prefix;
  if (o.prefix_tokens > 0) prefix = time_prefix_hit(model.weights, eo, o.prefix_tokens, rng);
  const ModelConfig& c = model.weights.config;
  const double weight_mb = static_cast<double>(matrix_bytes) / 1e6;
  // How the layer matrices sit in memory: q8_0/q4_0 are interleaved at load unless --no-interleave.
  const bool interleaved = !model.weights.layers.empty() &&
                           model.weights.layers[0].wq.layout == WeightLayout::Interleaved8;
  const char* layout = interleaved ? "interleaved8" : "rows";

  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = model.checkpoint.path;
    j["dtype"] = dtype_name(model.weights.matrix_dtype());
    j["layout"] = layout;
    j["kv_dtype"] = dtype_name(eo.kv_dtype);
    j["backend"] = backend.name;
    j["isa"] = backend.kernels;
    j["threads"] = engine.n_threads();
    j["batch"] = o.batch;
    j["repetitions"] = o.repetitions;
    j["load_seconds"] = model.load_seconds;
    j["matrix_bytes"] = matrix_bytes;
    j["matrix_bytes_copied"] = copied_bytes;
    j["weight_bytes_in_huge_pages"] = huge_weight_bytes;
    j["transparent_huge_pages"] = transparent_huge_pages_mode();
    j["n_params_layers"] = c.n_layers;
    if (!pp.empty())
      j["pp"] = {{"tokens", o.prompt_tokens},
                 {"tok_per_s", pps.median},
                 {"min", pps.min},
                 {"max", pps.max},
                 {"runs", pp}};
    if (!tg.empty())
      j["tg"] = {{"tokens", o.gen_tokens},
                 {"tok_per_s", tgs.median},
                 {"min", tgs.min},
                 {"max", tgs.max},
                 {"runs", tg}};
    if (probe) {
      j["bandwidth"] = {{"probe_pages", probe->huge_pages() ? "2MiB" : "4KiB"},
                        {"probe_bytes_in_huge_pages", probe_huge_bytes},
                        {"probe_gbps", probe_gbps},
                        {"probe_gbps_median", probes.median},
                        {"decode_weight_gbps_median", decode_gbps},
                        {"fraction_of_probe", decode_fraction},
                        {"fraction_of_probe_median", fractions.median}};
    }
    if (o.prefix_tokens > 0) {
      j["prefix_cache"] = {{"prompt_tokens", o.prefix_tokens},
                           {"cached_tokens", prefix.cached},
                           {"ttft_cold_s", prefix.cold},
                           {"ttft_warm_s", prefix.warm},
                           {"warm_over_cold", prefix.warm / prefix.cold}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "model %s: %s%s, %.1f MB of matrices, %s KV cache, %s backend, isa %s, %d threads, ready in "
      "%.3f s\n",
      model.checkpoint.path.c_str(), dtype_name(model.weights.matrix_dtype()),
      interleaved ? " interleaved" : "", weight_mb, dtype_name(eo.kv_dtype), backend.name.c_str(),
      backend.kernels.c_str(), engine.n_threads(), model.load_seconds);
  // Where decode reads the weights from: the file mapping (4 KiB pages) or ember's own copy.
  std::printf(
      "weights: %.1f MB read in place from the file, %.1f MB copied at load (their memory: %.1f MB "
      "in "
      "2 MiB pages; transparent huge pages: %s)\n",
      static_cast<double>(matrix_bytes - copied_bytes) / 1e6,
      static_cast<double>(copied_bytes) / 1e6, static_cast<double>(huge_weight_bytes) / 1e6,
      transparent_huge_pages_mode().c_str());
  std::printf("| %-8s | %5s | %12s | %21s |\n", "test", "batch", "tok/s (med)", "min .. max");
  if (!pp.empty()) {
    std::printf("| pp%-6lld | %5d | %12.1f | %9.1f .. %-9.1f |\n", (long long)o.prompt_tokens, 1,
                pps.median, pps.min, pps.max);
  }
  if (!tg.empty()) {
    std::printf("| tg%-6lld | %5lld | %12.1f | %9.1f .. %-9.1f |\n", (long long)o.gen_tokens,
                (long long)o.batch, tgs.median, tgs.min, tgs.max);
  }
  if (probe) {
    std::printf(
        "decode reads %.1f MB of weights per step: %.1f GB/s; read-bandwidth probe (%s pages, "
        "just before each repetition) %.1f GB/s (%.1f .. %.1f); decode / probe %.0f%% (%.0f%% .. "
        "%.0f%%), median of %zu repetitions\n",
        static_cast<double>(matrix_bytes) / 1e6, decode_gbps,
        probe->huge_pages() ? (probe_huge_bytes == probe->bytes() ? "2 MiB" : "partly 2 MiB")
                            : "4 KiB",
        probes.median, probes.min, probes.max, 100 * fractions.median, 100 * fractions.min,
        100 * fractions.max, decode_fraction.size());
  }
  if (o.prefix_tokens > 0) {
    std::printf(
        "prefix cache: %lld-token prompt, TTFT cold %.1f ms, warm %.1f ms (%lld tokens cached), "
        "warm/cold %.3f\n",
        (long long)o.prefix_tokens, prefix.cold * 1e3, prefix.warm * 1e3, (long long)prefix.cached,
        prefix.warm / prefix.cold);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode speed (like llama-bench)");
  o->model.add_to(*cmd);
  o->model.add_kv_dtype_option(*cmd);
  cmd->add_option("-p,--n-prompt", o->prompt_tokens, "Prompt tokens for the prefill test (0: skip)")
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", o->gen_tokens, "Tokens to decode per sequence (0: skip)")
      ->capture_default_str();
  cmd->add_option("-b,--batch", o->batch, "Sequences decoding together")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Timed repetitions (median reported)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->model.threads, "Threads (default: physical cores)");
  cmd->add_option("--decode-context", o->decode_context,
                  "Prompt tokens each decoding sequence starts from")
      ->capture_default_str();
  cmd->add_option("--prefix-tokens", o->prefix_tokens,
                  "Also time TTFT of a prefix-cache hit on a prompt this long");
  cmd->add_flag("--probe", o->probe,
                "Before each decode repetition, measure the machine's read bandwidth and report "
                "decode's weight stream as a share of it");
  cmd->add_option("--probe-mb", o->probe_mb, "The probe's buffer (MiB; well past any cache)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable output");
  return [o] { return bench_command(*o); };
}

}  // namespace ember::cli
