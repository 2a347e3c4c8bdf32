#include "ember/cli/rank_follower.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "ember/parallel/communicator.h"
#include "ember/parallel/step_mirror.h"

namespace ember::cli {

int follow_rank0(const LoadedModel& model, const LLMEngineOptions& options, const char* what) {
  ModelRunner runner(model.weights, runner_options(options));
  Batch batch;
  std::vector<int32_t> tables;
  int64_t steps = 0;
  // Under --pp the runner keeps as many steps in flight as rank 0's engine does; a follower only
  // collects the logits to free their buffers.
  for (; parallel::receive_step(batch, tables); ++steps) {
    if (runner.in_flight() == runner.steps_in_flight()) runner.collect();
    runner.launch(batch);
  }
  while (runner.in_flight() > 0) runner.collect();
  std::fprintf(stderr, "[ember] rank %d: rank 0 stopped %s after %lld steps\n",
               parallel::world().rank(), what, static_cast<long long>(steps));
  return 0;
}

void mirror_steps_to_followers(LLMEngineOptions& options) {
  const int64_t block_size = options.engine.block_size;
  options.before_forward = [block_size](const Batch& b) { parallel::send_step(b, block_size); };
}

StopFollowers::~StopFollowers() {
  if (active && std::uncaught_exceptions() == 0) parallel::send_stop();
}

}  // namespace ember::cli
