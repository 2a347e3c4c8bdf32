// `ember` subcommands. Each registers its options on a CLI11 subcommand and returns the callback
// that runs it; main() dispatches and turns ember::Error into one line on stderr + exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "ember/cli/options.h"

namespace ember::cli {

using Command = std::function<int()>;

Command add_run_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_score_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_template_command(CLI::App& app);
Command add_trace_command(CLI::App& app);

}  // namespace ember::cli
