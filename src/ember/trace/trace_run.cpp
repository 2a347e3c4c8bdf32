#include "ember/trace/trace_run.h"

#include <chrono>
#include <memory>

#include "ember/core/error.h"

namespace ember {

TracedRun run_traced(LLMEngine& engine, GenerationRequest request, TraceRecorder& recorder) {
  if (!engine.idle())
    throw Error("ember trace: the engine is busy; a trace runs one request alone");
  const auto n_prompt = static_cast<int64_t>(request.prompt.size());
  recorder.set_prompt_tokens(n_prompt);
  std::shared_ptr<RequestStream> stream = engine.add_request(std::move(request));
  recorder.set_kv_probe([&engine] {
    return TraceRecorder::KvSnapshot{engine.kv().used_blocks(), engine.kv_bytes_in_use(),
                                     engine.kv().stats().hit_blocks};
  });
  engine.set_forward_observer(&recorder);
  TracedRun run;
  int32_t last_token = -1;
  try {
    for (bool finished = false; !finished;) {
      const bool worked = engine.step();
      while (std::optional<StreamEvent> e = stream->pop(std::chrono::milliseconds(0))) {
        if (!e->tokens.empty()) last_token = e->tokens.back();
        run.generated += static_cast<int64_t>(e->tokens.size());
        run.text += e->text;
        if (e->finished) {
          if (e->finish_reason == FinishReason::Error) throw Error(e->error);
          run.finish = e->finish_reason;
          finished = true;
        }
      }
      if (!worked && !finished) throw Error("engine: idle before the request finished");
    }
  } catch (...) {
    engine.set_forward_observer(nullptr);
    recorder.set_kv_probe(nullptr);
    throw;
  }
  engine.set_forward_observer(nullptr);
  recorder.set_kv_probe(nullptr);
  recorder.finish(run.generated, last_token);
  if (!recorder.problem().empty()) throw Error("ember trace: " + recorder.problem());
  return run;
}

}  // namespace ember
