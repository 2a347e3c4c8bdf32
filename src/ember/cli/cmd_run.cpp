// `ember run`: prompt -> generated text on stdout (streamed), stats on stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/generator.h"
#include "ember/tokenizer/utf8_stream.h"

namespace ember::cli {

namespace {

struct RunOptions {
  ModelOptions model;
  std::string prompt;
  std::string prompt_file;
  int64_t n_predict = 256;
  SamplingParams sampling;
  int64_t seed = -1;
  bool no_bos = false;
  bool ignore_eos = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_command(const RunOptions& o) {
  LoadedModel model = load_model(o.model.load_options(/*need_tokenizer=*/true));
  const Tokenizer& tok = *model.tokenizer;
  std::string prompt = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
  std::vector<int32_t> ids = tok.encode(prompt, !o.no_bos && tok.add_bos_default());
  if (ids.empty()) throw Error("the prompt is empty and BOS is disabled: nothing to condition on");

  EngineOptions eo;
  eo.kv_dtype = o.model.parsed_kv_dtype();
  eo.max_context = o.model.context;
  Engine engine(model.weights, eo);

  SamplingParams sp = o.sampling;
  sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  Sampler sampler(sp, static_cast<int32_t>(engine.vocab_size()));
  GenerateOptions go;
  go.max_new_tokens = o.n_predict;
  go.eos_token_id = o.ignore_eos ? -1 : tok.eos_id();

  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  Utf8StreamDecoder stream;
  bool first = true;
  Sequence seq;
  GenerationStats stats = generate(engine, seq, ids, go, sampler, [&](int32_t token) {
    std::string bytes = tok.token_bytes(token);
    // SentencePiece: the space a leading '▁' stands for is dropped right after BOS.
    if (first && prompt.empty() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    first = false;
    std::string text = stream.push(bytes);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::string tail = stream.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  std::fprintf(stderr,
               "\n[ember] model %s (%s, %s), %d threads, load %.3f s, seed %llu\n"
               "[ember] prompt tokens %lld, generated %lld%s\n"
               "[ember] time to first token %.2f ms, prefill %.1f tok/s, decode %.1f tok/s\n"
               "[ember] KV cache in use %lld bytes (%lld blocks of %lld tokens)\n",
               model.checkpoint.path.c_str(), format_name(model.checkpoint.format),
               dtype_name(model.weights.matrix_dtype()), engine.n_threads(), model.load_seconds,
               static_cast<unsigned long long>(sp.seed),
               static_cast<long long>(stats.prompt_tokens),
               static_cast<long long>(stats.generated_tokens),
               stats.stopped_at_eos       ? " (stopped at EOS)"
               : stats.stopped_at_context ? " (context full)"
                                          : "",
               stats.ttft_seconds * 1e3, stats.prefill_tokens_per_second(),
               stats.decode_tokens_per_second(), static_cast<long long>(stats.kv_bytes_in_use),
               static_cast<long long>(stats.kv_bytes_in_use / engine.kv_shape().bytes_per_block()),
               static_cast<long long>(engine.kv_shape().block_size));
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  o->model.add_to(*cmd);
  o->model.add_kv_dtype_option(*cmd);
  CLI::Option* prompt = cmd->add_option("-p,--prompt", o->prompt,
                                        "Prompt text (default: empty, i.e. start from BOS)");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file")->excludes(prompt);
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.repeat_last_n,
                  "Tokens the penalty looks back over")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (default: random, printed in the stats)");
  cmd->add_option("-t,--threads", o->model.threads, "Threads (default: physical cores)");
  cmd->add_option("-c,--ctx", o->model.context, "Context length (default: min(model max, 4096))");
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past EOS");
  return [o] { return run_command(*o); };
}

}  // namespace ember::cli
