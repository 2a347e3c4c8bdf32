// `ember run`: prompt -> generated text on stdout (streamed), stats on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/grammar/grammar_constraint.h"
#include "ember/engine/grammar/json_schema_grammar.h"
#include "ember/engine/llm_engine.h"

namespace ember::cli {

namespace {

struct RunOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt;
  std::string prompt_file;
  int64_t n_predict = 256;
  bool no_bos = false;
  bool ignore_eos = false;
  std::string grammar_file;      // --grammar: GBNF
  std::string json_schema_file;  // --json-schema
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, path + ": cannot read prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --grammar / --json-schema: the constraint the generated text must match (null for none).
std::shared_ptr<TokenConstraint> output_constraint(const RunOptions& o, const Tokenizer& tok) {
  if (o.grammar_file.empty() && o.json_schema_file.empty()) return nullptr;
  std::string gbnf;
  if (!o.grammar_file.empty()) {
    gbnf = read_file(o.grammar_file);
  } else {
    auto schema = nlohmann::ordered_json::parse(read_file(o.json_schema_file), nullptr, false);
    if (schema.is_discarded())
      throw Error(ErrorKind::InvalidArgument, "--json-schema: not valid JSON");
    try {
      gbnf = grammar::json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      throw Error(ErrorKind::InvalidArgument,
                  "--json-schema " + o.json_schema_file + ": " + e.what());
    }
  }
  grammar::Grammar parsed;
  try {
    parsed = grammar::parse_gbnf(gbnf);
  } catch (const Error& e) {
    throw Error(ErrorKind::InvalidArgument, "--grammar " + o.grammar_file + ": " + e.what());
  }
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(std::move(parsed),
                                                                   grammar::build_token_trie(tok));
  return std::make_shared<grammar::GrammarConstraint>(std::move(compiled));
}

struct RunStats {
  int64_t prompt_tokens = 0, generated = 0;
  double ttft = 0, prefill = 0, decode = 0;
  FinishReason finish = FinishReason::None;
  int64_t kv_bytes = 0;
  // The most blocks held at once in the main pool and in the sliding-window layers' pool.
  int64_t kv_blocks = 0, window_blocks = 0;
};

void print_stats(const LoadedModel& model, const LLMEngine& engine, const RunStats& s,
                 uint64_t seed) {
  const double prefill_tps = s.prefill > 0 ? s.prompt_tokens / s.prefill : 0;
  const double decode_tps = s.decode > 0 && s.generated > 1 ? (s.generated - 1) / s.decode : 0;
  const KvShape& kv = engine.runner().kv_shape();
  std::fprintf(
      stderr,
      "\n[ember] model %s (%s, %s), %s backend (%s kernels), %d threads, load %.3f s, seed %llu\n"
      "[ember] prompt tokens %lld, generated %lld%s\n"
      "[ember] time to first token %.2f ms, prefill %.1f tok/s, decode %.1f tok/s\n"
      "[ember] KV cache in use %lld bytes (%lld blocks of %lld tokens)\n",
      model.checkpoint.path.c_str(), format_name(model.checkpoint.format),
      model.weights.matrix_dtypes().c_str(), model.weights.backend->info().name.c_str(),
      model.weights.backend->info().kernels.c_str(), engine.runner().n_threads(),
      model.load_seconds, static_cast<unsigned long long>(seed),
      static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated),
      s.finish == FinishReason::Stop ? " (stopped at EOS)"
      : s.finish == FinishReason::Length && s.generated > 0 &&
              s.prompt_tokens + s.generated >= engine.max_request_tokens()
          ? " (context full)"
          : "",
      s.ttft * 1e3, prefill_tps, decode_tps, static_cast<long long>(s.kv_bytes),
      static_cast<long long>(s.kv_blocks), static_cast<long long>(kv.block_size));
  if (engine.window_kv() != nullptr) {
    const int64_t window_bytes = engine.runner().window_kv_bytes_per_block();
    std::fprintf(stderr,
                 "[ember] of those, the global layers' pool %lld blocks of %lld bytes, the "
                 "sliding-window layers' pool (window %lld) %lld blocks of %lld bytes\n",
                 static_cast<long long>(s.kv_blocks), static_cast<long long>(kv.bytes_per_block()),
                 static_cast<long long>(engine.runner().window_layers_window()),
                 static_cast<long long>(s.window_blocks), static_cast<long long>(window_bytes));
  }
  const SpeculativeStats& spec = engine.speculative_stats();
  if (spec.verify_steps > 0 || spec.propose_seconds > 0) {
    std::fprintf(stderr,
                 "[ember] speculative (%s): %lld guesses, %lld kept (acceptance %.1f%%), "
                 "%.2f tokens per verifying step (%lld steps; %lld steps without a guess), "
                 "propose %.2f ms, verify steps %.1f ms\n",
                 engine.speculative_options().proposer_name().c_str(),
                 static_cast<long long>(spec.drafted), static_cast<long long>(spec.accepted),
                 100 * spec.acceptance_rate(), spec.mean_accepted_length(),
                 static_cast<long long>(spec.verify_steps),
                 static_cast<long long>(spec.steps_without_guesses()), spec.propose_seconds * 1e3,
                 spec.verify_seconds * 1e3);
  }
}

int run_command(const RunOptions& o) {
  LoadedModel model = o.model.load(/*need_tokenizer=*/true);
  const Tokenizer& tok = *model.tokenizer;
  std::string prompt = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
  std::vector<int32_t> ids = tok.encode(prompt, !o.no_bos && tok.add_bos_default());
  if (ids.empty()) throw Error("the prompt is empty and BOS is disabled: nothing to condition on");

  const std::unique_ptr<LoadedModel> draft = o.model.load_draft(model);
  LLMEngineOptions eo = o.model.engine_options(draft.get());
  // The whole prompt in one forward step.
  eo.scheduler.max_batched_tokens =
      std::max<int64_t>(eo.scheduler.max_batched_tokens, static_cast<int64_t>(ids.size()));
  LLMEngine engine(model.weights, &tok, eo);

  GenerationRequest req;
  req.prompt = ids;
  req.sampling = o.sampling.params();
  req.max_tokens = o.n_predict;
  req.stop_at_context = true;
  req.ignore_eos = o.ignore_eos;
  req.constraint = output_constraint(o, tok);
  // SentencePiece: the space a leading '▁' stands for is dropped right after BOS.
  req.strip_leading_space = prompt.empty();
  std::shared_ptr<RequestStream> stream = engine.add_request(std::move(req));

  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  RunStats stats;
  stats.prompt_tokens = static_cast<int64_t>(ids.size());
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first_token = start;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  run_until_finished(engine, *stream, [&](StreamEvent& e) {
    if (stats.generated == 0 && (!e.tokens.empty() || e.finished)) {
      first_token = Clock::now();
      stats.ttft = stats.prefill = seconds(start, first_token);
    }
    stats.generated += static_cast<int64_t>(e.tokens.size());
    // The cache only grows until the request finishes and gives its blocks back.
    stats.kv_bytes = std::max(stats.kv_bytes, engine.kv_bytes_in_use());
    stats.kv_blocks = std::max(stats.kv_blocks, engine.kv().used_blocks());
    if (engine.window_kv() != nullptr) {
      stats.window_blocks = std::max(stats.window_blocks, engine.window_kv()->used_blocks());
    }
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    if (e.finished) {
      stats.finish = e.finish_reason;
      if (e.finish_reason == FinishReason::Error) throw Error(e.error);
    }
  });
  stats.decode = seconds(first_token, Clock::now());
  std::fputc('\n', stdout);
  std::fflush(stdout);
  print_stats(model, engine, stats, o.sampling.params().seed);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  o->sampling.add_to(*cmd);
  CLI::Option* prompt = cmd->add_option("-p,--prompt", o->prompt,
                                        "Prompt text (default: empty, i.e. start from BOS)");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file")->excludes(prompt);
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past EOS");
  CLI::Option* grammar = cmd->add_option(
      "--grammar", o->grammar_file, "GBNF file the generated text must match (llama.cpp's format)");
  cmd->add_option("--json-schema", o->json_schema_file,
                  "JSON Schema file: the generated text is a JSON value valid against it")
      ->excludes(grammar);
  return [o] { return run_command(*o); };
}

}  // namespace ember::cli
