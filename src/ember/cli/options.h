// The CLI options shared by ember's commands, declared once: what model to load and how (every
// model command), how to run it (the commands that run the model: backend, threads, context, KV
// cache), and how to sample (run, chat). Each command adds the sets it needs to its subcommand, so
// `--help` of every command lists exactly what it accepts.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ember/core/dtype.h"
#include "ember/engine/llm_engine.h"
#include "ember/engine/sampling/sampler.h"
#include "ember/model/model_loader.h"

namespace ember::cli {

struct ModelOptions {
  // Which option sets add_to() registers.
  static constexpr unsigned kModelPositional = 1;  // MODEL is a positional argument (inspect)
  static constexpr unsigned kRunsModel = 2;        // --backend, -t, -c, --kv-dtype

  std::string model;
  std::string tokenizer;
  std::string dtype;
  bool dummy = false;
  uint64_t dummy_seed = 1234;
  bool no_interleave = false;
  bool no_mmap = false;
  std::string backend = "cpu";
  int threads = 0;
  int device = -1;             // --device: the GPU of --backend cuda (-1: 0, or the local rank)
  bool check_weights = false;  // --check-weights
  int64_t context = 0;
  std::string kv_dtype = "f32";
  std::string kv_dtype_k;  // empty: as --kv-dtype
  std::string kv_dtype_v;
  bool kv_rotate = false;
  std::string kv_k_scales = "auto";  // auto | channel | token (EngineOptions::kv_k_channel)
  int32_t lookup = 0;                // --lookup N: prompt-lookup speculation
  int32_t draft_max = 5;             // --draft-max K
  std::string draft;                 // --draft MODEL: speculation with a draft model
  std::string draft_dtype;       // --draft-dtype: the draft (or the model itself) quantized to this
  int64_t draft_layers = 0;      // --draft-layers N: the draft cut to its first N layers
  int tp = 1;                    // --tp N: this process is one of N ranks (mpirun -np N)
  int pp = 1;                    // --pp N: this process is one of N pipeline stages
  int64_t pp_micro_batches = 0;  // --pp-micro-batches N: 0 is 4 per stage
  int64_t pp_in_flight = 0;      // --pp-in-flight N: 0 is one per stage
  double rank_timeout = 120;     // --rank-timeout S: the longest wait for the other ranks

  void add_to(CLI::App& app, unsigned sets = 0);
  LoadOptions load_options(bool need_tokenizer) const;
  // load_model(load_options(...)), as this rank's shard under --tp (parallel/tensor_parallel.h).
  LoadedModel load(bool need_tokenizer) const;
  bool wants_draft() const { return !draft.empty() || !draft_dtype.empty() || draft_layers > 0; }
  // The draft model --draft / --draft-dtype ask for, built into the target's backend, its
  // vocabulary checked against the target's; null when neither was given (--draft-layers alone
  // cuts the target itself).
  std::unique_ptr<LoadedModel> load_draft(const LoadedModel& target) const;
  // The context, KV cache and speculation options as engine options (scheduler defaults), with
  // the draft load_draft() gave (which must outlive the engine). Throws when a draft was asked for
  // and the command did not load it.
  LLMEngineOptions engine_options(const LoadedModel* draft = nullptr) const;
  std::optional<DType> parsed_dtype() const;
  DType parsed_kv_dtype() const;  // K's dtype
  DType parsed_kv_dtype_v() const;
};

// --kv-offload-ram / --kv-offload-dir / --kv-offload-disk (serve, bench): the KV offload tiers.
struct KvOffloadOptions {
  std::string ram;   // a size ("4GiB"); empty: no RAM tier
  std::string dir;   // empty: no disk tier
  std::string disk;  // the disk tier's bound; empty: 10 GiB
  void add_to(CLI::App& app);
  KvTierOptions parsed() const;  // throws ember::Error naming the flag
};

struct SamplingOptions {
  SamplingParams sampling;
  int64_t seed = -1;  // -1: a random seed, drawn once

  void add_to(CLI::App& app);
  // The parameters with the seed resolved (the same value on every call).
  SamplingParams params() const;

 private:
  mutable std::optional<uint64_t> resolved_seed_;
};

// Default model when -m is absent: the stories260K fixture beside the repo (or $EMBER_FIXTURES).
std::string default_model_path();

}  // namespace ember::cli
