#include "ember/engine/generator.h"

#include <chrono>

#include "ember/core/error.h"

namespace ember {

GenerationStats generate(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt,
                         const GenerateOptions& options, Sampler& sampler,
                         const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (prompt.empty()) throw Error("generate: the prompt has no tokens (enable BOS or give text)");
  GenerationStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  const auto start = Clock::now();
  std::span<const float> logits = engine.feed(seq, prompt);
  const auto prefill_done = Clock::now();
  stats.prefill_seconds = seconds(start, prefill_done);
  auto decode_start = prefill_done;

  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    int32_t token = sampler.sample(logits, seq.tokens);
    if (i == 0) {
      decode_start = Clock::now();
      stats.ttft_seconds = seconds(start, decode_start);
    }
    if (token == options.eos_token_id) {
      stats.stopped_at_eos = true;
      break;
    }
    ++stats.generated_tokens;
    if (!on_token(token)) break;
    if (i + 1 == options.max_new_tokens) break;
    if (seq.n_cached + 1 > engine.max_context()) {
      stats.stopped_at_context = true;
      break;
    }
    logits = engine.feed(seq, std::span<const int32_t>(&token, 1));
  }
  stats.decode_seconds = seconds(decode_start, Clock::now());
  stats.kv_bytes_in_use = engine.kv_bytes_in_use();
  engine.release(seq);
  return stats;
}

}  // namespace ember
