// Single-sequence generation on top of the engine: prefill the prompt in one step, then decode
// one token per step until max_new_tokens, EOS or the context limit. Used by `ember run`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ember/engine/engine.h"
#include "ember/engine/sampler.h"

namespace ember {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  int32_t eos_token_id = -1;  // -1: never stop on a token
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;   // the prompt's forward step
  double ttft_seconds = 0;      // start -> first token sampled
  double decode_seconds = 0;    // every later token
  int64_t kv_bytes_in_use = 0;  // at the end of generation, before the sequence is released
  bool stopped_at_eos = false;
  bool stopped_at_context = false;

  double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated_tokens > 1
               ? static_cast<double>(generated_tokens - 1) / decode_seconds
               : 0;
  }
};

// Calls on_token(token) for every generated token (EOS excluded); on_token returning false stops.
// `seq` must be empty; it is released before returning.
GenerationStats generate(Engine& engine, Sequence& seq, const std::vector<int32_t>& prompt,
                         const GenerateOptions& options, Sampler& sampler,
                         const std::function<bool(int32_t)>& on_token);

}  // namespace ember
