// `ember bench`: like llama-bench. pp: one P-token prompt in a single forward step (tok/s);
// tg: B sequences decoding N tokens together, one step per token (aggregate tok/s).
// Median and spread over repetitions, after a warm-up that is not counted.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "ember/cli/bench_roofline.h"
#include "ember/cli/commands.h"
#include "ember/core/bandwidth_probe.h"
#include "ember/core/error.h"
#include "ember/core/huge_pages.h"
#include "ember/core/mapped_file.h"
#include "ember/engine/llm_engine.h"

namespace ember::cli {

namespace {

struct BenchOptions {
  ModelOptions model;
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int64_t batch = 1;
  int repetitions = 3;
  int64_t decode_context = 0;  // prompt tokens each decoding sequence starts from
  int64_t block_size = 0;  // tokens per KV block (serve's --block-size); 0: default_kv_block_size
  int64_t prefix_tokens = 0;         // > 0: also time a prefix-cache hit on a prompt this long
  std::string prefix_from = "pool";  // where the warm run finds the prefix: pool, ram or disk
  KvOffloadOptions offload;
  bool probe = false;       // run a read-bandwidth probe before each tg repetition
  int64_t probe_mb = 1024;  // its buffer
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

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = pick(rng);
  return tokens;
}

// A greedy request that never stops early: exactly max_tokens tokens.
GenerationRequest bench_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest req;
  req.prompt = std::move(prompt);
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  req.max_tokens = max_tokens;
  return req;
}

// Steps until the engine is idle (every request finished).
void drain(LLMEngine& engine) {
  while (engine.step()) {
  }
}

uint64_t tokens_generated(const LLMEngine& engine) {
  return engine.metrics().generation_tokens_total;
}

// Steps until `n` more tokens than `since` have been generated. (Under --pp with steps in flight a
// step may launch a batch and sample none.)
void step_until_generated(LLMEngine& engine, uint64_t since, int64_t n) {
  while (tokens_generated(engine) < since + static_cast<uint64_t>(n) && engine.step()) {
  }
}

// One prefill of `n` random tokens up to its first token, of a one-token request; returns seconds.
double time_prefill(LLMEngine& engine, int64_t n, std::mt19937& rng) {
  const uint64_t before = tokens_generated(engine);
  engine.add_request(bench_request(random_tokens(n, engine.vocab_size(), rng), 1));
  const double start = now_seconds();
  step_until_generated(engine, before, 1);
  const double elapsed = now_seconds() - start;
  drain(engine);
  return elapsed;
}

// B sequences, each started from a max(context, 1)-token prompt (prefilled together with their
// first token sampled, untimed), then n decode tokens each (greedy); seconds for the B x n tokens.
// From the first tokens on, the tokens generated until every sequence is done are timed: a batch
// launched under --pp while the last first tokens came is counted with the rest.
double time_decode(LLMEngine& engine, int64_t batch, int64_t n, int64_t context,
                   std::mt19937& rng) {
  const uint64_t before = tokens_generated(engine);
  for (int64_t b = 0; b < batch; ++b) {
    engine.add_request(bench_request(
        random_tokens(std::max<int64_t>(context, 1), engine.vocab_size(), rng), n + 1));
  }
  step_until_generated(engine, before, batch);  // the prompts, and each sequence's first token
  const uint64_t first = tokens_generated(engine);
  const double start = now_seconds();
  drain(engine);
  const double elapsed = now_seconds() - start;
  const uint64_t timed = tokens_generated(engine) - first;
  return timed > 0 ? elapsed * static_cast<double>(batch * n) / static_cast<double>(timed)
                   : elapsed;
}

// Time to first token for a cold P-token prompt, then for a second request sharing all of it
// (prefix cache on): returns {cold seconds, warm seconds, cached tokens}.
struct PrefixResult {
  double cold = 0, warm = 0;
  int64_t cached = 0;
  int64_t restored_blocks = 0;   // of the cached blocks, copied back from an offload tier
  double tier_read_seconds = 0;  // time the tier spent reading them
  int64_t tier_read_bytes = 0;
};
// --prefix-from ram|disk: between the two requests the cached blocks leave the pool for that tier
// (disk: no RAM tier, and the files' pages are dropped from the page cache so the read is the
// disk's).
PrefixResult time_prefix_hit(const ModelWeights& weights, const LLMEngineOptions& base, int64_t n,
                             const std::string& from, std::mt19937& rng) {
  LLMEngineOptions eo = base;
  eo.engine.prefix_caching = true;
  eo.engine.max_context = std::max<int64_t>(eo.engine.max_context, n + 1);
  LLMEngine engine(weights, nullptr, eo);
  const std::vector<int32_t> prompt = random_tokens(n, engine.vocab_size(), rng);
  auto first_token = [&] {
    std::shared_ptr<RequestStream> stream = engine.add_request(bench_request(prompt, 1));
    const double start = now_seconds();
    PrefixResult r;
    run_until_finished(engine, *stream, [&](StreamEvent& e) {
      if (!e.tokens.empty()) r.cold = now_seconds() - start;
      if (e.finished) r.cached = e.cached_prompt_tokens;
    });
    return r;
  };
  PrefixResult r;
  r.cold = first_token().cold;
  if (from != "pool") engine.spill_cached_blocks();
  if (from == "disk") engine.drop_disk_tier_page_cache();
  const KvTierStats before = engine.kv_tier_stats();
  const PrefixResult warm = first_token();
  const KvTierStats after = engine.kv_tier_stats();
  r.warm = warm.cold;
  r.cached = warm.cached;
  const KvTierCounters& b = from == "disk" ? before.disk : before.ram;
  const KvTierCounters& a = from == "disk" ? after.disk : after.ram;
  r.restored_blocks = a.hits - b.hits;
  r.tier_read_seconds = a.read_seconds - b.read_seconds;
  r.tier_read_bytes = a.bytes_read - b.bytes_read;
  return r;
}

// The offload tiers of the prefix test (--kv-offload-*), checked against --prefix-from: ram needs a
// RAM tier; disk a directory, and then no RAM tier, so that the blocks go straight to disk.
KvTierOptions prefix_tiers(const BenchOptions& o) {
  KvTierOptions tiers = o.offload.parsed();
  if (o.prefix_from == "pool") return tiers;
  if (o.prefix_tokens <= 0) {
    throw Error::invalid_request("--prefix-from", "--prefix-from needs --prefix-tokens N");
  }
  if (o.prefix_from == "ram" && tiers.ram_bytes <= 0) {
    throw Error::invalid_request("--prefix-from", "--prefix-from ram needs --kv-offload-ram");
  }
  if (o.prefix_from == "disk") {
    if (tiers.disk_dir.empty()) {
      throw Error::invalid_request("--prefix-from", "--prefix-from disk needs --kv-offload-dir");
    }
    tiers.ram_bytes = 0;
  }
  return tiers;
}

// Everything one bench invocation measured, and the facts its reports print beside it.
struct BenchRun {
  std::vector<double> pp, tg, probe_gbps, decode_fraction;
  std::unique_ptr<BandwidthProbe> probe;
  Backend* device_probe = nullptr;  // --probe on a GPU: the backend measures its own memory
  PrefixResult prefix;
  int threads = 0;
  int64_t matrix_bytes = 0, copied_bytes = 0;
  int64_t mapped_huge_bytes = 0;  // of the file mappings, bytes in 2 MiB pages after the warm-up
  // What one token's decode step reads: matrix_bytes, less the experts a token is not routed to
  // (mixtures of experts: k of E per layer). The bandwidth figures are set against it.
  int64_t active_bytes = 0;
  std::vector<int64_t> expert_load;  // tokens routed to each expert, [n_layers * n_experts]
  BackendInfo backend;
  int64_t kv_bytes_per_token = 0;  // K + V of one token across all layers, in the cache's dtype
  int64_t kv_block_size = 0;       // tokens per block of the engine's KV pool
  SpeculativeStats spec;           // --lookup: over all decode repetitions
  std::vector<double> tg_plain;    // --lookup: the same decodes without speculation, alternating
  bool interleaved =
      false;  // see has_interleaved_layout: interleaved at load unless --no-interleave
  PrefillRoofline roofline;  // --probe with a prompt: compute ceilings and prefill's op groups
};

// Bytes of the weights' file mappings the kernel maps with 2 MiB pages (folios of the file's cache
// that size, mapped whole), counted after the warm-up has faulted them in.
int64_t mapped_huge_page_bytes(const ModelWeights& weights) {
  std::vector<std::pair<const void*, std::size_t>> ranges;
  for (const auto& m : weights.mappings) {
    if (m && m->size() > 0) ranges.emplace_back(m->data(), m->size());
  }
  return ranges.empty() ? 0 : static_cast<int64_t>(huge_page_backed_bytes(ranges));
}

LLMEngineOptions bench_engine_options(const BenchOptions& o, const LoadedModel* draft) {
  LLMEngineOptions eo = o.model.engine_options(draft);
  eo.engine.max_context = std::max<int64_t>(
      {o.model.context, o.prompt_tokens + 1, o.decode_context + o.gen_tokens + 2, 16});
  eo.engine.max_sequences = o.batch;
  if (o.block_size > 0) eo.engine.block_size = o.block_size;
  // A prefill, or every sequence's prompt, in one forward step; all sequences decode together.
  eo.scheduler.max_batched_tokens =
      std::max<int64_t>({o.prompt_tokens, o.batch * std::max<int64_t>(o.decode_context, 1), 16});
  eo.scheduler.max_sequences = o.batch;
  return eo;
}

// One decode repetition, with --probe's read bandwidth measured just before it (the machine's
// bandwidth drifts, so each repetition is set against its own figure).
void measure_decode(const BenchOptions& o, LLMEngine& engine, std::mt19937& rng, BenchRun& run) {
  const bool probing = run.probe || run.device_probe;
  if (probing) {
    // Median of 3 passes: one pass is ~40 ms and single passes swing.
    std::vector<double> passes;
    for (int i = 0; i < 3; ++i) {
      passes.push_back(run.device_probe != nullptr
                           ? run.device_probe->probe_read_bandwidth(o.probe_mb << 20)
                           : run.probe->measure(run.threads));
    }
    run.probe_gbps.push_back(summarize(passes).median);
  }
  run.tg.push_back(static_cast<double>(o.batch * o.gen_tokens) /
                   time_decode(engine, o.batch, o.gen_tokens, o.decode_context, rng));
  if (probing) {
    // A decode step reads every matrix once for the whole batch.
    const double step_gbps =
        run.tg.back() / static_cast<double>(o.batch) * static_cast<double>(run.active_bytes) / 1e9;
    run.decode_fraction.push_back(step_gbps / run.probe_gbps.back());
  }
}

BenchRun measure(const BenchOptions& o, const LoadedModel& model, const LLMEngineOptions& eo) {
  LLMEngine engine(model.weights, nullptr, eo);
  BenchRun run;
  run.threads = engine.runner().n_threads();
  run.kv_block_size = engine.kv().block_size();
  run.matrix_bytes = model.weights.matrix_bytes();
  run.active_bytes = model.weights.active_matrix_bytes();
  std::mt19937 rng(42);
  // Warm-up: touch every weight page and the KV pool once.
  time_prefill(engine, std::min<int64_t>(16, engine.max_request_tokens() - 1), rng);
  if (o.gen_tokens > 0) time_decode(engine, o.batch, std::min<int64_t>(4, o.gen_tokens), 0, rng);
  // --probe runs in the pages most of the weights sit in: 2 MiB when ember copied them at load or
  // the file's cache holds them in 2 MiB folios (mapped_file.cpp), else 4 KiB.
  run.mapped_huge_bytes = mapped_huge_page_bytes(model.weights);
  Backend& backend = *model.weights.backend;
  if (o.probe && o.gen_tokens > 0 && backend.probe_read_bandwidth(o.probe_mb << 20) > 0) {
    run.device_probe = &backend;  // the call above was its warm-up pass
  } else if (o.probe && o.gen_tokens > 0) {
    const bool huge =
        2 * (model.weights.copied_matrix_bytes() + run.mapped_huge_bytes) > run.matrix_bytes;
    run.probe = std::make_unique<BandwidthProbe>(static_cast<size_t>(o.probe_mb) << 20, huge);
    run.probe->measure(run.threads);  // warm-up pass
  }
  // --lookup: an engine without speculation decodes the same prompts (the same random draws)
  // between the speculative repetitions, for a same-run ratio.
  std::unique_ptr<LLMEngine> plain;
  if (eo.speculative.enabled() && o.gen_tokens > 0) {
    LLMEngineOptions plain_eo = eo;
    plain_eo.speculative = {};
    plain = std::make_unique<LLMEngine>(model.weights, nullptr, plain_eo);
    time_decode(*plain, o.batch, std::min<int64_t>(4, o.gen_tokens), 0, rng);
  }
  const bool roofline = o.probe && o.prompt_tokens > 0;
  if (roofline) {
    run.roofline.peaks = backend.probe_compute();
    run.roofline.family = prefill_matmul_family(backend.info().kernels,
                                                model.weights.matrix_dtype(), run.roofline.peaks);
  }
  for (int r = 0; r < o.repetitions; ++r) {
    if (o.prompt_tokens > 0) {
      backend.set_op_timing(roofline);
      const double seconds = time_prefill(engine, o.prompt_tokens, rng);
      backend.set_op_timing(false);
      run.pp.push_back(o.prompt_tokens / seconds);
      run.roofline.seconds += seconds;
      run.roofline.tokens += o.prompt_tokens;
    }
    if (o.gen_tokens > 0) {
      std::mt19937 same = rng;
      measure_decode(o, engine, rng, run);
      if (plain) {
        run.tg_plain.push_back(static_cast<double>(o.batch * o.gen_tokens) /
                               time_decode(*plain, o.batch, o.gen_tokens, o.decode_context, same));
      }
    }
  }
  if (o.prefix_tokens > 0) {
    LLMEngineOptions prefix_eo = eo;
    prefix_eo.engine.kv_tiers = prefix_tiers(o);
    run.prefix = time_prefix_hit(model.weights, prefix_eo, o.prefix_tokens, o.prefix_from, rng);
  }
  if (roofline) run.roofline.ops = backend.op_times();
  run.copied_bytes = model.weights.copied_matrix_bytes();
  const std::span<const int64_t> load = engine.runner().expert_load();
  run.expert_load.assign(load.begin(), load.end());
  run.kv_bytes_per_token = engine.runner().kv_bytes_per_token();
  run.spec = engine.speculative_stats();
  run.backend = model.weights.backend->info();
  run.interleaved = !model.weights.layers.empty() &&
                    model.weights.layers[0].wq.layout == WeightLayout::Interleaved8;
  return run;
}

// KV bytes one generated token's attention reads: its sequence's context (the --decode-context
// prompt plus, on average, half the generated tokens) times the bytes per token.
double kv_bytes_read_per_token(const BenchOptions& o, const BenchRun& run) {
  const double context = static_cast<double>(o.decode_context) + 0.5 * o.gen_tokens;
  return context * static_cast<double>(run.kv_bytes_per_token);
}

// The proposer's cost per guess over the plain decode's cost per token, c: a draft forward step
// makes one guess per sequence in it, a plain step one token per sequence (prompt lookup: ~0).
double speculative_cost_ratio(const BenchRun& run) {
  if (run.spec.drafted == 0 || run.tg_plain.empty()) return 0.0;
  return run.spec.propose_seconds / static_cast<double>(run.spec.drafted) *
         summarize(run.tg_plain).median;
}

// Speculation's speedup in this run (median of the per-repetition ratios) and what the acceptance
// rate a and the cost ratio c predict, (1 - a^(k+1)) / ((1 - a)(k c + 1)): at k = the mean guesses
// per verifying step (the engine adapts k; the steps it proposed nothing in count in the measured
// speedup only), and per decode step (SpeculativeStats::theoretical_speedup_per_step: every step
// at its own k, a step without guesses at k = 0).
struct SpeculativeSpeedup {
  double measured = 0;
  double k_verifying = 0;       // the verifying steps' mean guesses
  double theory_verifying = 0;  // the formula at k_verifying
  double theory_per_step = 0;   // the formula step by step, over every decode step
};

SpeculativeSpeedup speculative_speedup(const BenchRun& run) {
  std::vector<double> ratios;
  for (size_t i = 0; i < run.tg.size() && i < run.tg_plain.size(); ++i) {
    ratios.push_back(run.tg[i] / run.tg_plain[i]);
  }
  const double a = std::min(run.spec.acceptance_rate(), 0.999999);
  const double k = run.spec.verify_steps > 0 ? static_cast<double>(run.spec.drafted) /
                                                   static_cast<double>(run.spec.verify_steps)
                                             : 0.0;
  const double c = speculative_cost_ratio(run);
  return {summarize(ratios).median, k, (1.0 - std::pow(a, k + 1)) / ((1.0 - a) * (k * c + 1.0)),
          run.spec.theoretical_speedup_per_step(c)};
}

double decode_weight_gbps(const BenchOptions& o, const BenchRun& run) {
  return summarize(run.tg).median / static_cast<double>(o.batch) *
         static_cast<double>(run.active_bytes) / 1e9;
}

void print_json(const BenchOptions& o, const LoadedModel& model, const LLMEngineOptions& eo,
                const BenchRun& run) {
  nlohmann::ordered_json j;
  j["model"] = model.checkpoint.path;
  j["dtype"] = dtype_name(model.weights.matrix_dtype());
  j["matrix_dtypes"] = model.weights.matrix_dtypes();
  j["layout"] = run.interleaved ? "interleaved8" : "rows";
  j["kv_dtype"] = eo.engine.kv_dtype_label();
  j["backend"] = run.backend.name;
  j["isa"] = run.backend.kernels;
  j["threads"] = run.threads;
  j["batch"] = o.batch;
  j["repetitions"] = o.repetitions;
  j["load_seconds"] = model.load_seconds;
  j["matrix_bytes"] = run.matrix_bytes;
  j["matrix_bytes_copied"] = run.copied_bytes;
  j["matrix_bytes_active"] = run.active_bytes;
  if (!run.expert_load.empty()) {
    // Tokens routed to each expert over the whole run (warm-up included), one row per layer.
    const int64_t E = model.weights.config.n_experts;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (size_t l = 0; l * E < run.expert_load.size(); ++l) {
      layers.push_back(std::vector<int64_t>(run.expert_load.begin() + l * E,
                                            run.expert_load.begin() + (l + 1) * E));
    }
    j["experts"] = {
        {"count", E}, {"used_per_token", model.weights.config.n_experts_used}, {"load", layers}};
  }
  j["weight_bytes_in_huge_pages"] = run.backend.weight_bytes_huge_pages;
  j["mapped_bytes_in_huge_pages"] = run.mapped_huge_bytes;
  j["transparent_huge_pages"] = transparent_huge_pages_mode();
  j["n_params_layers"] = model.weights.config.n_layers;
  auto series = [](int64_t tokens, const std::vector<double>& v) {
    const Summary s = summarize(v);
    return nlohmann::ordered_json{
        {"tokens", tokens}, {"tok_per_s", s.median}, {"min", s.min}, {"max", s.max}, {"runs", v}};
  };
  if (!run.pp.empty()) j["pp"] = series(o.prompt_tokens, run.pp);
  if (!run.tg.empty()) {
    j["tg"] = series(o.gen_tokens, run.tg);
    j["decode_context"] = o.decode_context;
    j["block_size"] = run.kv_block_size;
    j["kv_bytes_per_token"] = run.kv_bytes_per_token;
    j["kv_bytes_read_per_generated_token"] = kv_bytes_read_per_token(o, run);
    if (eo.speculative.enabled()) {
      const SpeculativeSpeedup speedup = speculative_speedup(run);
      j["speculative"] = {{"proposer", eo.speculative.uses_draft() ? "draft" : "lookup"},
                          {"draft", eo.speculative.proposer_name()},
                          {"lookup_ngram", eo.speculative.lookup_ngram},
                          {"draft_layers", eo.speculative.draft_layers},
                          {"cost_ratio", speculative_cost_ratio(run)},
                          {"draft_max", eo.speculative.draft_max},
                          {"verify_steps", run.spec.verify_steps},
                          {"drafted", run.spec.drafted},
                          {"accepted", run.spec.accepted},
                          {"acceptance_rate", run.spec.acceptance_rate()},
                          {"mean_accepted_length", run.spec.mean_accepted_length()},
                          {"propose_seconds", run.spec.propose_seconds},
                          {"verify_seconds", run.spec.verify_seconds},
                          {"tg_plain", series(o.gen_tokens, run.tg_plain)},
                          {"steps_without_guesses", run.spec.steps_without_guesses()},
                          {"steps_by_guesses", run.spec.steps_by_guesses},
                          {"speedup", speedup.measured},
                          {"theoretical_speedup", speedup.theory_verifying},
                          {"theoretical_speedup_per_step", speedup.theory_per_step}};
    }
  }
  if (run.probe || run.device_probe) {
    j["bandwidth"] = {
        {"probe_pages", run.device_probe          ? "device"
                        : run.probe->huge_pages() ? "2MiB"
                                                  : "4KiB"},
        {"probe_bytes_in_huge_pages",
         run.probe ? huge_page_backed_bytes(run.probe->data(), run.probe->bytes()) : 0},
        {"probe_gbps", run.probe_gbps},
        {"probe_gbps_median", summarize(run.probe_gbps).median},
        {"decode_weight_gbps_median", decode_weight_gbps(o, run)},
        {"fraction_of_probe", run.decode_fraction},
        {"fraction_of_probe_median", summarize(run.decode_fraction).median}};
  }
  if (!run.roofline.peaks.empty()) j["compute"] = roofline_json(run.roofline);
  if (o.prefix_tokens > 0) {
    const PrefixResult& p = run.prefix;
    j["prefix_cache"] = {{"prompt_tokens", o.prefix_tokens},
                         {"cached_tokens", p.cached},
                         {"ttft_cold_s", p.cold},
                         {"ttft_warm_s", p.warm},
                         {"warm_over_cold", p.warm / p.cold},
                         {"prefix_from", o.prefix_from},
                         {"restored_blocks", p.restored_blocks},
                         {"tier_read_bytes", p.tier_read_bytes},
                         {"tier_read_seconds", p.tier_read_seconds}};
  }
  std::printf("%s\n", j.dump(2).c_str());
}

void print_probe_line(const BenchRun& run, double decode_gbps) {
  const Summary probes = summarize(run.probe_gbps), fractions = summarize(run.decode_fraction);
  const char* where = "device memory";
  if (run.probe) {
    const size_t probe_huge_bytes = huge_page_backed_bytes(run.probe->data(), run.probe->bytes());
    where = !run.probe->huge_pages()                 ? "4 KiB pages"
            : probe_huge_bytes == run.probe->bytes() ? "2 MiB pages"
                                                     : "partly 2 MiB pages";
  }
  std::printf(
      "decode reads %.1f MB of weights per step: %.1f GB/s; read-bandwidth probe (%s, "
      "just before each repetition) %.1f GB/s (%.1f .. %.1f); decode / probe %.0f%% (%.0f%% .. "
      "%.0f%%), median of %zu repetitions\n",
      static_cast<double>(run.active_bytes) / 1e6, decode_gbps, where, probes.median, probes.min,
      probes.max, 100 * fractions.median, 100 * fractions.min, 100 * fractions.max,
      run.decode_fraction.size());
}

void print_text(const BenchOptions& o, const LoadedModel& model, const LLMEngineOptions& eo,
                const BenchRun& run) {
  std::printf(
      "model %s: %s%s, %.1f MB of matrices, %s KV cache, %s backend, isa %s, %d threads, ready in "
      "%.3f s\n",
      model.checkpoint.path.c_str(), model.weights.matrix_dtypes().c_str(),
      run.interleaved ? " interleaved" : "", static_cast<double>(run.matrix_bytes) / 1e6,
      eo.engine.kv_dtype_label().c_str(), run.backend.name.c_str(), run.backend.kernels.c_str(),
      run.threads, model.load_seconds);
  if (model.weights.config.is_moe()) {
    const ModelConfig& c = model.weights.config;
    int64_t busiest = 0, idle = 0;
    for (int64_t n : run.expert_load) {
      busiest = std::max(busiest, n);
      idle += n == 0 ? 1 : 0;
    }
    std::printf(
        "mixture of experts: %lld of %lld experts per token, %.1f MB of matrices read per token; "
        "busiest expert %lld tokens, %lld of %zu (layer, expert) pairs never routed to\n",
        (long long)c.n_experts_used, (long long)c.n_experts,
        static_cast<double>(run.active_bytes) / 1e6, (long long)busiest, (long long)idle,
        run.expert_load.size());
  }
  // Where decode reads the weights from: the file mapping (2 MiB pages where the file's cache
  // holds 2 MiB folios, else 4 KiB) or ember's own copy.
  std::printf(
      "weights: %.1f MB read in place from the file (its mapping: %.1f MB in 2 MiB pages), %.1f MB "
      "copied at load (their memory: %.1f MB in 2 MiB pages; transparent huge pages: %s)\n",
      static_cast<double>(run.matrix_bytes - run.copied_bytes) / 1e6,
      static_cast<double>(run.mapped_huge_bytes) / 1e6, static_cast<double>(run.copied_bytes) / 1e6,
      static_cast<double>(run.backend.weight_bytes_huge_pages) / 1e6,
      transparent_huge_pages_mode().c_str());
  std::printf("| %-8s | %5s | %12s | %21s |\n", "test", "batch", "tok/s (med)", "min .. max");
  if (!run.pp.empty()) {
    const Summary pps = summarize(run.pp);
    std::printf("| pp%-6lld | %5d | %12.1f | %9.1f .. %-9.1f |\n", (long long)o.prompt_tokens, 1,
                pps.median, pps.min, pps.max);
  }
  if (!run.tg.empty()) {
    const Summary tgs = summarize(run.tg);
    std::printf("| tg%-6lld | %5lld | %12.1f | %9.1f .. %-9.1f |\n", (long long)o.gen_tokens,
                (long long)o.batch, tgs.median, tgs.min, tgs.max);
  }
  if (!run.tg.empty()) {
    std::printf(
        "KV cache: %.1f KB per token (K + V, all layers); decode from %lld tokens of context reads "
        "%.2f MB of KV per generated token (beside %.1f MB of weights per step)\n",
        static_cast<double>(run.kv_bytes_per_token) / 1e3, (long long)o.decode_context,
        kv_bytes_read_per_token(o, run) / 1e6, static_cast<double>(run.matrix_bytes) / 1e6);
  }
  if (eo.speculative.enabled() && !run.tg.empty()) {
    std::printf(
        "speculative (%s, up to %d guesses): %lld guesses, %lld kept (acceptance %.1f%%), "
        "%.2f tokens per verifying step, proposer cost per guess %.3f of a plain token's\n",
        eo.speculative.proposer_name().c_str(), eo.speculative.draft_max,
        (long long)run.spec.drafted, (long long)run.spec.accepted, 100 * run.spec.acceptance_rate(),
        run.spec.mean_accepted_length(), speculative_cost_ratio(run));
    const SpeculativeSpeedup speedup = speculative_speedup(run);
    std::printf(
        "  plain decode of the same prompts %.1f tok/s; speedup %.2fx (median of %zu); "
        "theoretical (1 - a^(k+1)) / ((1 - a)(kc + 1)) at the verifying steps' mean k %.2f: "
        "%.2fx, %.0f%% of it; step by step over all %lld decode steps (%lld without a guess, "
        "k = 0): %.2fx, %.0f%% of it\n",
        summarize(run.tg_plain).median, speedup.measured, run.tg_plain.size(), speedup.k_verifying,
        speedup.theory_verifying, 100 * speedup.measured / speedup.theory_verifying,
        (long long)(run.spec.verify_steps + run.spec.steps_without_guesses()),
        (long long)run.spec.steps_without_guesses(), speedup.theory_per_step,
        100 * speedup.measured / speedup.theory_per_step);
  }
  if (run.probe || run.device_probe) print_probe_line(run, decode_weight_gbps(o, run));
  if (!run.roofline.peaks.empty()) print_roofline(run.roofline);
  if (o.prefix_tokens > 0) {
    const PrefixResult& p = run.prefix;
    std::printf(
        "prefix cache: %lld-token prompt, TTFT cold %.1f ms, warm %.1f ms (%lld tokens cached), "
        "warm/cold %.3f\n",
        (long long)o.prefix_tokens, p.cold * 1e3, p.warm * 1e3, (long long)p.cached,
        p.warm / p.cold);
    if (o.prefix_from != "pool") {
      std::printf(
          "  warm prefix restored from the %s tier: %lld blocks, %.1f MB in %.1f ms (%.2f GB/s)\n",
          o.prefix_from.c_str(), (long long)p.restored_blocks, p.tier_read_bytes / 1e6,
          p.tier_read_seconds * 1e3,
          p.tier_read_seconds > 0 ? p.tier_read_bytes / p.tier_read_seconds / 1e9 : 0.0);
    }
  }
}

int bench_command(const BenchOptions& o) {
  if (o.prompt_tokens < 0 || o.gen_tokens < 0 || o.batch < 1 || o.repetitions < 1) {
    throw Error(ErrorKind::InvalidArgument, "bench: -p and -n must be >= 0, --batch and -r >= 1");
  }
  if (o.probe_mb < 1) throw Error(ErrorKind::InvalidArgument, "bench: --probe-mb must be >= 1");
  if (o.block_size < 0) {
    throw Error(ErrorKind::InvalidArgument, "bench: --block-size must be >= 1 (0: the default)");
  }
  prefix_tiers(o);  // a bad flag fails before the model loads
  LoadedModel model = o.model.load(/*need_tokenizer=*/false);
  const std::unique_ptr<LoadedModel> draft = o.model.load_draft(model);
  const LLMEngineOptions eo = bench_engine_options(o, draft.get());
  const BenchRun run = measure(o, model, eo);
  if (o.json) {
    print_json(o, model, eo, run);
  } else {
    print_text(o, model, eo, run);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode speed (like llama-bench)");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  cmd->add_option("-p,--n-prompt", o->prompt_tokens, "Prompt tokens for the prefill test (0: skip)")
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", o->gen_tokens, "Tokens to decode per sequence (0: skip)")
      ->capture_default_str();
  cmd->add_option("-b,--batch", o->batch, "Sequences decoding together")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Timed repetitions (median reported)")
      ->capture_default_str();
  cmd->add_option("--decode-context", o->decode_context,
                  "Prompt tokens each decoding sequence starts from")
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size,
                  "Tokens per KV block (as serve's --block-size; default 64 for a per-channel q4_0 "
                  "K cache, 16 otherwise)");
  cmd->add_option("--prefix-tokens", o->prefix_tokens,
                  "Also time TTFT of a prefix-cache hit on a prompt this long");
  cmd->add_option("--prefix-from", o->prefix_from,
                  "Where the second request finds the prefix: pool (the KV pool), ram or disk "
                  "(the cached blocks are moved to that offload tier between the requests)")
      ->check(CLI::IsMember({"pool", "ram", "disk"}))
      ->capture_default_str();
  o->offload.add_to(*cmd);
  cmd->add_flag(
      "--probe", o->probe,
      "Before each decode repetition, measure the machine's read bandwidth and report "
      "decode's weight stream as a share of it; with a prompt, measure each kernel "
      "family's compute peak and report prefill's FLOP/s (matmuls, attention) against it");
  cmd->add_option("--probe-mb", o->probe_mb, "The probe's buffer (MiB; well past any cache)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable output");
  return [o] { return bench_command(*o); };
}

}  // namespace ember::cli
