// `ember chat`: an interactive conversation. The conversation's KV cache is kept between turns:
// each turn re-renders the chat template, finds how much of it is already cached (the common
// token prefix), and prefills only the rest.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/engine.h"
#include "ember/engine/sampler.h"
#include "ember/tokenizer/chat_template.h"
#include "ember/tokenizer/utf8_stream.h"

namespace ember::cli {

namespace {

struct ChatOptions {
  ModelOptions model;
  std::string system;
  std::string template_name;
  int64_t n_predict = 256;
  SamplingParams sampling;
  int64_t seed = -1;
};

int chat_command(const ChatOptions& o) {
  LoadedModel model = load_model(o.model.load_options(/*need_tokenizer=*/true));
  const Tokenizer& tok = *model.tokenizer;
  ChatTemplate chat_template = o.template_name.empty()
                                   ? ChatTemplate::detect(find_chat_template_source(
                                         model.checkpoint.path, model.checkpoint.gguf.get()))
                                   : ChatTemplate::from_name(o.template_name);
  EngineOptions eo;
  eo.kv_dtype = o.model.parsed_kv_dtype();
  eo.max_context = o.model.context;
  Engine engine(model.weights, eo);
  SamplingParams sp = o.sampling;
  sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  Sampler sampler(sp, static_cast<int32_t>(engine.vocab_size()));
  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "[ember] chat with %s (template %s); end with EOF or /exit, /reset clears\n",
               model.checkpoint.path.c_str(), chat_template.name());

  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  Sequence seq;
  std::string line;
  for (int turn = 1;; ++turn) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      engine.release(seq);
      seq = Sequence{};
      messages.resize(o.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::vector<int32_t> ids = encode_chat_prompt(tok, chat_template.format(messages, true));
    // Reuse the cached prefix; re-prefill from the first token that differs.
    size_t common = 0;
    while (common < seq.tokens.size() && common < ids.size() && seq.tokens[common] == ids[common])
      ++common;
    if (common == ids.size()) --common;  // the last token must run to give logits
    engine.truncate(seq, static_cast<int64_t>(common));
    const int64_t reused = seq.n_cached;
    if (static_cast<int64_t>(ids.size()) + o.n_predict > engine.max_context()) {
      throw Error("the conversation no longer fits in the context (" +
                  std::to_string(engine.max_context()) + " tokens); /reset or raise --ctx");
    }
    auto start = std::chrono::steady_clock::now();
    std::span<const float> logits =
        engine.feed(seq, std::span<const int32_t>(ids).subspan(static_cast<size_t>(reused)));
    const double prefill_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Utf8StreamDecoder stream;
    std::string reply;
    int64_t generated = 0;
    auto decode_start = std::chrono::steady_clock::now();
    for (; generated < o.n_predict; ++generated) {
      int32_t token = sampler.sample(logits, seq.tokens);
      if (token == tok.eos_id()) break;
      std::string text = stream.push(tok.token_bytes(token));
      reply += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      logits = engine.feed(seq, std::span<const int32_t>(&token, 1));
    }
    std::string tail = stream.flush();
    reply += tail;
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const double decode_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
    messages.push_back({"assistant", reply});
    std::fprintf(stderr,
                 "[ember] turn %d: %zu prompt tokens, %lld reused from the cache, %lld prefilled "
                 "(%.1f tok/s), %lld generated (%.1f tok/s)\n",
                 turn, ids.size(), static_cast<long long>(reused),
                 static_cast<long long>(ids.size() - static_cast<size_t>(reused)),
                 prefill_s > 0 ? (ids.size() - reused) / prefill_s : 0.0,
                 static_cast<long long>(generated), decode_s > 0 ? generated / decode_s : 0.0);
  }
  engine.release(seq);
  return 0;
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd =
      app.add_subcommand("chat", "Interactive chat; the KV cache is kept between turns");
  o->model.add_to(*cmd);
  o->model.add_kv_dtype_option(*cmd);
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--chat-template", o->template_name,
                  "Force a template: chatml, llama3, llama2, plain");
  cmd->add_option("-n,--n-predict", o->n_predict, "Maximum tokens per reply")
      ->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (default: random)");
  cmd->add_option("-t,--threads", o->model.threads, "Threads (default: physical cores)");
  cmd->add_option("-c,--ctx", o->model.context, "Context length (default: min(model max, 4096))");
  return [o] { return chat_command(*o); };
}

}  // namespace ember::cli
