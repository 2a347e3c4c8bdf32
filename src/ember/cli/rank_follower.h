// The commands whose input reaches rank 0 only (serve's HTTP requests, chat's terminal) under
// --tp/--pp: rank 0 runs the engine and sends each step to the other ranks before its forward pass
// (parallel/step_mirror.h); the others hold their part of the model and a KV pool like rank 0's
// and run those steps until rank 0 says it is done.
#pragma once

#include "ember/engine/llm_engine.h"
#include "ember/model/model_loader.h"

namespace ember::cli {

// A rank other than 0: runs each step rank 0 sends until the stop; `what` names rank 0's work in
// the closing line ("serving", "the chat"). Returns the exit code.
int follow_rank0(const LoadedModel& model, const LLMEngineOptions& options, const char* what);

// Rank 0: sends every step to the followers before it runs (options.before_forward).
void mirror_steps_to_followers(LLMEngineOptions& options);

// Rank 0: sends the followers' stop when the command returns normally (after an error, main ends
// every rank).
struct StopFollowers {
  bool active = false;
  ~StopFollowers();
};

}  // namespace ember::cli
