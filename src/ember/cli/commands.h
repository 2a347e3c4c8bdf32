// `ember` subcommands. Each registers its options on a CLI11 subcommand and returns the callback
// that runs it; main() dispatches and turns ember::Error into one line on stderr + exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "ember/core/dtype.h"
#include "ember/model/model_loader.h"

namespace ember::cli {

using Command = std::function<int()>;

// Options every model-loading command shares: -m, --tokenizer, --dtype, --dummy, --seed-weights.
struct ModelOptions {
  std::string model;
  std::string tokenizer;
  std::string dtype;
  bool dummy = false;
  uint64_t dummy_seed = 1234;
  bool no_interleave = false;
  bool no_mmap = false;
  int threads = 0;
  int64_t context = 0;
  std::string kv_dtype = "f32";
  std::string backend = "cpu";

  void add_to(CLI::App& app, bool model_is_positional = false);
  // --kv-dtype, for the commands that run the model.
  void add_kv_dtype_option(CLI::App& app);
  LoadOptions load_options(bool need_tokenizer) const;
  std::optional<DType> parsed_dtype() const;
  DType parsed_kv_dtype() const;
};

Command add_run_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_score_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_chat_command(CLI::App& app);

// Default model when -m is absent: the stories260K fixture beside the repo (or $EMBER_FIXTURES).
std::string default_model_path();

}  // namespace ember::cli
