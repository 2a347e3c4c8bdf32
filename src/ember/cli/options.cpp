#include "ember/cli/options.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "ember/backend/kv_row_format.h"
#include "ember/core/error.h"
#include "ember/engine/draft_proposer.h"
#include "ember/kv/capacity_plan.h"
#include "ember/parallel/communicator.h"
#include "ember/parallel/tensor_parallel.h"

namespace ember::cli {

std::string default_model_path() {
  std::filesystem::path base = "../shared";
  if (const char* env = std::getenv("EMBER_FIXTURES"); env != nullptr && *env != '\0') base = env;
  return (base / "models/stories260K/stories260K.gguf").string();
}

namespace {

void add_run_options(CLI::App& app, ModelOptions& o) {
  app.add_option("--backend", o.backend,
                 "Backend that runs the model: cpu (SIMD kernels, threads), reference (scalar, "
                 "one thread, double accumulation: the oracle, slow) or cuda (an NVIDIA GPU; "
                 "builds configured with -DEMBER_CUDA=ON)")
      ->capture_default_str();
  app.add_option("--device", o.device,
                 "With --backend cuda: which GPU (0-based; default 0, and under --tp/--pp each "
                 "rank its node-local rank)");
  app.add_option("-t,--threads", o.threads, "Threads (default: physical cores)");
  app.add_option("-c,--ctx", o.context, "Context length (default: min(model max, 4096))");
  app.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache dtype for K and V: f32 (exact), f16 or bf16 (half the memory and "
                 "attention traffic; f16 is llama.cpp's default cache), q8_0 (34 bytes per 32 "
                 "values) or q4_0 (18 per 32), quantized as tokens enter the cache")
      ->capture_default_str();
  app.add_option("--kv-dtype-k", o.kv_dtype_k, "K cache dtype, overriding --kv-dtype for K");
  app.add_option("--kv-dtype-v", o.kv_dtype_v, "V cache dtype, overriding --kv-dtype for V");
  app.add_option("--lookup", o.lookup,
                 "Speculative decoding by prompt lookup: guess the next tokens by matching the "
                 "last N tokens (N down to 1) earlier in the prompt and output; the output is "
                 "unchanged, only faster where it repeats its input (0: off)")
      ->capture_default_str();
  app.add_option("--tp", o.tp,
                 "Tensor parallelism: this process is one of N ranks started by mpirun -np N "
                 "(heads and FFN rows split over them, two all-reduces per layer; run, score, "
                 "bench, serve, chat)")
      ->capture_default_str();
  app.add_option("--pp", o.pp,
                 "Pipeline parallelism: this process is one of N stages started by mpirun -np N "
                 "(consecutive layers on each; the hidden states handed on, the last stage's "
                 "logits sent to all; run, score, bench, serve, chat)")
      ->capture_default_str();
  app.add_option("--pp-micro-batches", o.pp_micro_batches,
                 "With --pp: cut a step of many tokens (a prompt) into up to N micro-batches so "
                 "that the stages work at once, each on another (0: 4 per stage; 1: off; a "
                 "micro-batch holds 16 tokens at least, so decode steps stay whole)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--pp-in-flight", o.pp_in_flight,
                 "With --pp: batches of sequences in flight at once, so that each stage runs one "
                 "while the next stage runs the one before (0: one per stage; 1: off, each step "
                 "through every stage before the next)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--rank-timeout", o.rank_timeout,
                 "With --tp/--pp: seconds a rank waits for the others in a step before the job "
                 "ends with an error (a stopped or hung rank)")
      ->capture_default_str();
  app.add_option("--draft-max", o.draft_max, "Speculative guesses per step (1..64)")
      ->capture_default_str();
  app.add_option("--draft", o.draft,
                 "Speculative decoding with a draft model (any format ember loads, sharing the "
                 "model's vocabulary): it guesses the next --draft-max tokens greedily, the model "
                 "checks them in one step; the output is unchanged");
  app.add_option("--draft-dtype", o.draft_dtype,
                 "Quantize the draft at load to this dtype; without --draft, the model itself "
                 "quantized lower is the draft (self-speculation, e.g. q4_0 on a bf16 model)");
  app.add_option("--draft-layers", o.draft_layers,
                 "Early-exit draft: the first N layers of the draft (without --draft: of the "
                 "model, reading the same weights) with the final norm and head");
  app.add_flag("--kv-rotate", o.kv_rotate,
               "Store K multiplied by a Hadamard matrix per quantization group (queries rotated "
               "alike, scores unchanged): spreads K's outlier channels before quantization, for "
               "q4_0/q8_0 K caches");
  app.add_option("--kv-k-scales", o.kv_k_scales,
                 "How a q4_0 K cache is scaled: channel (a scale and minimum per channel and "
                 "KV block, 64 tokens by default, sealed when the block is full and exact until "
                 "then; KIVI), "
                 "token (q4_0's groups of 32 along each token's head_dim) or auto (channel for a "
                 "q4_0 K cache)")
      ->check(CLI::IsMember({"auto", "channel", "token"}))
      ->capture_default_str();
}

}  // namespace

void ModelOptions::add_to(CLI::App& app, unsigned sets) {
  if (sets & kModelPositional) {
    app.add_option("model", model,
                   "Model: HF directory, config.json (with --dummy), .gguf, or llama2.c .bin")
        ->required();
  } else {
    app.add_option("-m,--model", model,
                   "Model: HF directory, config.json (with --dummy), .gguf, or llama2.c .bin "
                   "(default: the stories260K fixture in ../shared)");
  }
  app.add_option("--tokenizer", tokenizer,
                 "Tokenizer file (llama2.c tokenizer.bin) overriding the one beside the model");
  app.add_option(
      "--dtype", dtype,
      "Weight dtype for matrices, converted or quantized at load: f32, f16, bf16, q8_0, q4_0, "
      "q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs (default: as stored; "
      "--dummy: bf16)");
  app.add_flag("--dummy", dummy,
               "Seeded random weights from the config alone (no weight files read)");
  app.add_option("--dummy-seed", dummy_seed, "Seed of --dummy weights")->capture_default_str();
  app.add_flag("--no-interleave", no_interleave,
               "Keep q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs blocks in the file's layout "
               "(zero-copy) "
               "instead of interleaving "
               "them 8 rows at a time for the decode kernels at load");
  app.add_flag("--check-weights", check_weights,
               "Scan every weight for NaN / Inf at load (default: norms and biases fully, matrices "
               "on a sample of rows); a warning names the tensors");
  app.add_flag("--no-mmap", no_mmap,
               "Copy matrices stored in the compute dtype out of the file into huge-page memory "
               "instead of reading them in place from the mapping (faster decode on float weights, "
               "slower load; the process then holds its own copy)");
  if (sets & kRunsModel) add_run_options(app, *this);
}

namespace {

DType parse_kv_dtype(const std::string& flag, const std::string& text) {
  const std::optional<DType> d = dtype_from_name(text);
  if (!d || !kv_dtype_supported(*d)) {
    throw Error::invalid_request(
        flag, "unknown " + flag + " '" + text + "' (expected f32, f16, bf16, q8_0 or q4_0)");
  }
  return *d;
}

}  // namespace

DType ModelOptions::parsed_kv_dtype() const {
  return kv_dtype_k.empty() ? parse_kv_dtype("--kv-dtype", kv_dtype)
                            : parse_kv_dtype("--kv-dtype-k", kv_dtype_k);
}

DType ModelOptions::parsed_kv_dtype_v() const {
  return kv_dtype_v.empty() ? parse_kv_dtype("--kv-dtype", kv_dtype)
                            : parse_kv_dtype("--kv-dtype-v", kv_dtype_v);
}

std::optional<DType> ModelOptions::parsed_dtype() const {
  if (dtype.empty()) return std::nullopt;
  auto d = dtype_from_name(dtype);
  if (!d || *d == DType::Q8_1 || *d == DType::Q8_K) {
    throw Error::invalid_request(
        "--dtype", "unknown --dtype '" + dtype +
                       "' (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, "
                       "q4_k, q5_k, q6_k, iq4_nl or iq4_xs)");
  }
  return d;
}

LoadOptions ModelOptions::load_options(bool need_tokenizer) const {
  LoadOptions o;
  o.path = model.empty() ? default_model_path() : model;
  o.tokenizer_path = tokenizer;
  o.dtype = parsed_dtype();
  o.dummy = dummy;
  o.dummy_seed = dummy_seed;
  o.backend.name = backend;
  o.backend.n_threads = threads;
  o.backend.device = device < 0 ? 0 : device;
  o.check_weights = check_weights;
  o.backend.interleave_quantized = !no_interleave;
  o.backend.copy_weights = no_mmap;
  o.load_tokenizer = need_tokenizer;
  return o;
}

LoadedModel ModelOptions::load(bool need_tokenizer) const {
  LoadOptions lo = load_options(need_tokenizer);
  if (tp == 1 && pp == 1) return load_model(lo);
  if (wants_draft()) {
    throw Error::invalid_request(tp > 1 ? "--tp" : "--pp",
                                 "--tp/--pp with speculative decoding is not built yet");
  }
  if (!(rank_timeout > 0)) {
    throw Error::invalid_request("--rank-timeout", "--rank-timeout must be positive");
  }
  const parallel::ParallelLayout layout = parallel::join_parallel(tp, pp);
  // Ranks on one host take one GPU each unless --device says which.
  if (backend == "cuda" && device < 0) lo.backend.device = parallel::local_rank();
  lo.adapt_checkpoint = [layout](Checkpoint& c) { parallel::cut_checkpoint(c, layout); };
  LoadedModel m = load_model(lo);
  parallel::attach_parallel(m.weights, layout);
  parallel::set_rank_timeout(rank_timeout);  // from here the ranks step together
  return m;
}

std::unique_ptr<LoadedModel> ModelOptions::load_draft(const LoadedModel& target) const {
  if (draft.empty() && draft_dtype.empty()) return nullptr;
  std::optional<DType> dt;
  if (!draft_dtype.empty()) {
    dt = dtype_from_name(draft_dtype);
    if (!dt || *dt == DType::Q8_1 || *dt == DType::Q8_K) {
      throw Error::invalid_request("--draft-dtype", "unknown --draft-dtype '" + draft_dtype +
                                                        "' (expected a --dtype name, e.g. q4_0)");
    }
  }
  LoadOptions lo = load_options(/*need_tokenizer=*/target.tokenizer != nullptr);
  if (!draft.empty()) {  // another model: its own tokenizer, no dummy weights
    lo.path = draft;
    lo.tokenizer_path.clear();
    lo.dummy = false;
    lo.dtype = dt;
  } else {
    lo.dtype = dt;  // the model itself, quantized as asked
  }
  lo.shared_backend = target.weights.backend;
  auto d = std::make_unique<LoadedModel>(load_model(lo));
  if (d->tokenizer && target.tokenizer) check_draft_vocabulary(*target.tokenizer, *d->tokenizer);
  if (d->weights.matrix_bytes() > target.weights.matrix_bytes()) {
    std::fprintf(stderr,
                 "[ember] warning: the draft's weights (%lld bytes) are larger than the model's "
                 "(%lld): it will cost more than it saves\n",
                 static_cast<long long>(d->weights.matrix_bytes()),
                 static_cast<long long>(target.weights.matrix_bytes()));
  }
  return d;
}

LLMEngineOptions ModelOptions::engine_options(const LoadedModel* draft_model) const {
  LLMEngineOptions o;
  o.engine.kv_dtype = parsed_kv_dtype();
  if (const DType v = parsed_kv_dtype_v(); v != o.engine.kv_dtype) o.engine.kv_dtype_v = v;
  o.engine.kv_rotate = kv_rotate;
  if (kv_k_scales != "auto") {
    o.engine.kv_k_channel = kv_k_scales == "channel";
    if (*o.engine.kv_k_channel && o.engine.kv_dtype != DType::Q4_0) {
      throw Error::invalid_request(
          "--kv-k-scales", std::string("--kv-k-scales channel needs a q4_0 K cache; K is ") +
                               dtype_name(o.engine.kv_dtype));
    }
  }
  // serve and bench take --block-size over this.
  o.engine.block_size = default_kv_block_size(o.engine);
  o.speculative.lookup_ngram = lookup;
  o.speculative.draft_max = draft_max;
  if ((!draft.empty() || !draft_dtype.empty()) && draft_model == nullptr) {
    throw Error::invalid_request(draft.empty() ? "--draft-dtype" : "--draft",
                                 "this command does not run speculative decoding");
  }
  if (draft_model != nullptr) {
    o.speculative.draft = &draft_model->weights;
    o.speculative.draft_label = draft.empty()
                                    ? draft_dtype + " copy of the model"
                                    : std::filesystem::path(draft).filename().string() +
                                          (draft_dtype.empty() ? "" : " as " + draft_dtype);
  } else {
    o.speculative.draft_label = "the model";
  }
  o.speculative.draft_layers = draft_layers;
  o.engine.max_context = context;
  o.engine.pipeline_micro_batches = pp_micro_batches > 0 ? pp_micro_batches : 4 * pp;
  o.engine.pipeline_in_flight = pp_in_flight > 0 ? pp_in_flight : pp;
  return o;
}

void KvOffloadOptions::add_to(CLI::App& app) {
  app.add_option("--kv-offload-ram", ram,
                 "Keep prefix KV blocks that leave the pool in host RAM, up to this size (e.g. "
                 "4GiB), LRU; a later prompt with the same prefix copies them back instead of "
                 "recomputing");
  app.add_option("--kv-offload-dir", dir,
                 "Keep them on disk in this directory too (below the RAM tier): one checksummed "
                 "file per block, kept across restarts");
  app.add_option("--kv-offload-disk", disk,
                 "Bound of the disk tier (default 10GiB), LRU; needs --kv-offload-dir");
}

KvTierOptions KvOffloadOptions::parsed() const {
  KvTierOptions t;
  if (!ram.empty()) t.ram_bytes = parse_byte_size(ram);
  if (!disk.empty()) {
    if (dir.empty()) {
      throw Error::invalid_request("--kv-offload-disk", "--kv-offload-disk needs --kv-offload-dir");
    }
    t.disk_bytes = parse_byte_size(disk);
  }
  t.disk_dir = dir;
  return t;
}

void SamplingOptions::add_to(CLI::App& app) {
  app.add_option("--temp", sampling.temperature, "Temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  app.add_option("--repeat-last-n", sampling.repeat_last_n, "Tokens the penalty looks back over")
      ->capture_default_str();
  app.add_option("--seed", seed, "Sampling seed (default: random, printed in the stats)");
}

SamplingParams SamplingOptions::params() const {
  if (!resolved_seed_) {
    resolved_seed_ = seed >= 0 ? static_cast<uint64_t>(seed) : parallel::shared_random_seed();
  }
  SamplingParams p = sampling;
  p.seed = *resolved_seed_;
  return p;
}

}  // namespace ember::cli
