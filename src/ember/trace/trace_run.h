// One request run alone on an engine with a TraceRecorder observing every step (ember trace, and
// the tests that check what a trace says against the model).
#pragma once

#include <cstdint>
#include <string>

#include "ember/engine/llm_engine.h"
#include "ember/trace/trace_recorder.h"

namespace ember {

struct TracedRun {
  std::string text;       // the generated text
  int64_t generated = 0;  // tokens given out
  FinishReason finish = FinishReason::None;
};

// Runs `request` on `engine` (idle, prefix caching off, a token budget that holds the whole prompt,
// so the prompt is one step) with `recorder` observing the forward passes and the KV cache after
// each step; finishes the recorder with the last token. Throws ember::Error when the request fails.
TracedRun run_traced(LLMEngine& engine, GenerationRequest request, TraceRecorder& recorder);

}  // namespace ember
