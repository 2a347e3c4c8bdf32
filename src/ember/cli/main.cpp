// ember: an LLM inference engine. Subcommands: run, chat, serve, inspect, tokenize, score, bench,
// quantize, template, trace.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/parallel/communicator.h"

int main(int argc, char** argv) {
  CLI::App app{"ember — LLM inference engine for Llama-family models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ember 0.1.0");
  const std::vector<std::pair<std::string, ember::cli::Command>> commands = {
      {"run", ember::cli::add_run_command(app)},
      {"chat", ember::cli::add_chat_command(app)},
      {"serve", ember::cli::add_serve_command(app)},
      {"inspect", ember::cli::add_inspect_command(app)},
      {"tokenize", ember::cli::add_tokenize_command(app)},
      {"score", ember::cli::add_score_command(app)},
      {"bench", ember::cli::add_bench_command(app)},
      {"quantize", ember::cli::add_quantize_command(app)},
      {"template", ember::cli::add_template_command(app)},
      {"trace", ember::cli::add_trace_command(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& [name, command] : commands) {
      if (app.got_subcommand(name)) return command();
    }
  } catch (const std::exception& e) {  // ember::Error and anything unexpected: one line, exit 1
    std::fprintf(stderr, "error: %s\n", e.what());
    // Under mpirun the other ranks may be waiting in a collective: end them all.
    if (ember::parallel::world_is_shared()) ember::parallel::world().abort(1);
    return 1;
  }
  return 1;
}
