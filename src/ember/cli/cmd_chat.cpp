// `ember chat`: an interactive conversation. Each turn renders the whole conversation through the
// chat template and runs it as one request of the engine's session for this chat: the session keeps
// the conversation's K/V between turns, so a turn prefills only from the first token where the
// re-rendered conversation differs from what is cached. Under --tp/--pp (mpirun) rank 0 holds the
// terminal and the others follow its steps (rank_follower.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "ember/cli/commands.h"
#include "ember/cli/rank_follower.h"
#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/parallel/communicator.h"
#include "ember/parallel/step_mirror.h"
#include "ember/tokenizer/chat_template.h"

namespace ember::cli {

namespace {

constexpr int64_t kChatSession = 1;

struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string system;
  std::string template_name;
  int64_t n_predict = 256;
};

// One turn: the reply, streamed to stdout; returns it and prints the turn's stats to stderr.
std::string chat_turn(LLMEngine& engine, const Tokenizer& tok, const ChatTemplate& chat_template,
                      const std::vector<ChatMessage>& messages, const ChatOptions& o, int turn) {
  std::vector<int32_t> ids =
      encode_chat_prompt(tok, chat_template.format(messages, chat_context_for(tok)));
  GenerationRequest req;
  req.prompt = ids;
  req.sampling = o.sampling.params();
  req.sampling.seed += static_cast<uint64_t>(turn - 1);  // a fresh draw per turn, reproducible
  req.max_tokens = o.n_predict;
  req.session = kChatSession;
  std::shared_ptr<RequestStream> stream;
  try {
    stream = engine.add_request(std::move(req));
  } catch (const Error& e) {
    throw Error(
        ErrorKind::ResourceExhausted,
        std::string(e.what()) + "; the conversation no longer fits (/reset or raise --ctx)");
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first = start;
  std::string reply;
  int64_t generated = 0, reused = 0;
  run_until_finished(engine, *stream, [&](StreamEvent& e) {
    if (generated == 0 && !e.tokens.empty()) first = Clock::now();
    generated += static_cast<int64_t>(e.tokens.size());
    reply += e.text;
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    if (e.finished) {
      reused = e.cached_prompt_tokens;
      if (e.finish_reason == FinishReason::Error) throw Error(e.error);
    }
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double prefill_s = std::chrono::duration<double>(first - start).count();
  const double decode_s = std::chrono::duration<double>(Clock::now() - first).count();
  const auto prefilled = static_cast<int64_t>(ids.size()) - reused;
  std::fprintf(stderr,
               "[ember] turn %d: %zu prompt tokens, %lld reused from the cache, %lld prefilled "
               "(%.1f tok/s), %lld generated (%.1f tok/s)\n",
               turn, ids.size(), static_cast<long long>(reused), static_cast<long long>(prefilled),
               prefill_s > 0 ? prefilled / prefill_s : 0.0, static_cast<long long>(generated),
               decode_s > 0 ? generated / decode_s : 0.0);
  return reply;
}

int chat_command(const ChatOptions& o) {
  // --tp/--pp: mpirun gives the terminal to rank 0 only, so rank 0 runs the chat and sends each
  // step to the other ranks, which run their share of it (rank_follower.h), as under serve.
  const bool split = o.model.tp != 1 || o.model.pp != 1;
  LoadedModel model = o.model.load(/*need_tokenizer=*/true);
  const Tokenizer& tok = *model.tokenizer;
  ChatTemplate chat_template =
      ChatTemplate::resolve(o.template_name, model.checkpoint.path, model.checkpoint.gguf.get());
  const std::unique_ptr<LoadedModel> draft = o.model.load_draft(model);
  LLMEngineOptions eo = o.model.engine_options(draft.get());
  eo.scheduler.max_batched_tokens = 4096;
  if (split) {
    // Collectives every rank takes part in come first: the sampling seed (rank 0's, drawn once
    // here and kept for every turn) and the pool size.
    (void)o.sampling.params();
    eo.engine.kv_blocks = parallel::rank0_value(eo.engine.kv_blocks);
    if (!parallel::is_first_rank()) return follow_rank0(model, eo, "the chat");
    mirror_steps_to_followers(eo);
  }
  // Once the engine has stopped (declared before it, so destroyed after): the followers' stop.
  StopFollowers stop_followers{split};
  LLMEngine engine(model.weights, &tok, eo);
  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "[ember] chat with %s (template %s); end with EOF or /exit, /reset clears\n",
               model.checkpoint.path.c_str(), chat_template.name());

  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::string line;
  for (int turn = 1;; ++turn) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      engine.end_session(kChatSession);
      messages.resize(o.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    messages.push_back({"assistant", chat_turn(engine, tok, chat_template, messages, o, turn)});
  }
  return 0;
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd =
      app.add_subcommand("chat", "Interactive chat; the KV cache is kept between turns");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  o->sampling.add_to(*cmd);
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--chat-template", o->template_name,
                  "A Jinja template file, or a built-in format: chatml, llama3, llama2, gemma, "
                  "phi3, plain (default: the model's own template)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Maximum tokens per reply")
      ->capture_default_str();
  return [o] { return chat_command(*o); };
}

}  // namespace ember::cli
