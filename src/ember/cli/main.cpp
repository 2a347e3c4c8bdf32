// ember: an LLM inference engine. Subcommands: run, inspect, score, bench, serve.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "ember/cli/commands.h"
#include "ember/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ember — LLM inference engine for Llama-family models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ember 0.1.0");
  ember::cli::Command run = ember::cli::add_run_command(app);
  ember::cli::Command inspect = ember::cli::add_inspect_command(app);
  ember::cli::Command score = ember::cli::add_score_command(app);
  ember::cli::Command bench = ember::cli::add_bench_command(app);
  ember::cli::Command serve = ember::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("score")) return score();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("serve")) return serve();
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
