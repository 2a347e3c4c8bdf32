// LLMEngine under --pp with steps in flight (vLLM's virtual engines, in one scheduler): each step
// launches one batch through this rank's stage and goes on; the batch's logits are collected
// (sampled, delivered) once as many batches are in flight as there are stages, or when nothing
// else can run. The running sequences are spread over the batches in flight (at most
// ceil(sequences / batches in flight) per batch), so while stage s + 1 runs batch i, stage s runs
// batch i + 1: a stage waits on the others only as long as their batches take longer than its own.
// A sequence whose every token is in flight is not scheduled until its logits are back; each stage
// runs the batches in the order they were launched, so the K/V one writes is there before a later
// one reads it, and a block given back and handed out again is rewritten only after the earlier
// batch's last use of it.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "ember/engine/llm_engine.h"

namespace ember {

bool LLMEngine::step_pipelined() {
  drop_cancelled();
  const auto room = static_cast<size_t>(runner_.steps_in_flight());
  bool worked = false;
  if (steps_in_flight_.size() < room && !scheduler_.idle()) {
    const auto live =
        static_cast<int64_t>(scheduler_.running().size() + scheduler_.waiting().size());
    const int64_t per_batch = (live + static_cast<int64_t>(room) - 1) / static_cast<int64_t>(room);
    std::vector<std::unique_ptr<Sequence>> failed;
    std::vector<ScheduledChunk> chunks =
        scheduler_.schedule(failed, std::max<int64_t>(1, per_batch));
    fail_unfittable(failed);
    worked = !failed.empty();
    if (!chunks.empty()) {
      launch_step(std::move(chunks));
      worked = true;
      if (steps_in_flight_.size() < room) {
        update_gauges();
        return true;
      }
    }
  }
  if (steps_in_flight_.empty()) {
    update_gauges();
    return worked;
  }
  collect_step();
  update_gauges();
  return true;
}

void LLMEngine::launch_step(std::vector<ScheduledChunk> chunks) {
  build_batch(chunks);
  ForwardObserver* observer = observe_step(chunks);
  runner_.set_observer(observer);
  if (before_forward_) before_forward_(batch_);
  runner_.launch(batch_);
  if (observer != forward_observer_) runner_.set_observer(forward_observer_);
  // The chunks' K/V is on its way into the cache: later steps (launched after this one, so run
  // after it by every stage) may read it.
  for (const ScheduledChunk& c : chunks) {
    scheduler_.commit(c);
    ++c.seq->chunks_in_flight;
  }
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.steps_total;
    publish_expert_load();
  }
  // Hidden states are the runner's last forward's, and an observed step reports its sampling:
  // such a step is collected before another is launched.
  const bool collect_now = !batch_.hidden_rows.empty() || observer != nullptr;
  steps_in_flight_.push_back({std::move(chunks)});
  if (collect_now) {
    while (!steps_in_flight_.empty()) collect_step();
  }
}

void LLMEngine::collect_step() {
  StepInFlight step = std::move(steps_in_flight_.front());
  steps_in_flight_.pop_front();
  const std::span<const float> logits = runner_.collect();
  for (const ScheduledChunk& c : step.chunks) --c.seq->chunks_in_flight;
  deliver(step.chunks, logits);
}

void LLMEngine::drop_steps_in_flight() {
  try {
    while (runner_.in_flight() > 0) runner_.collect();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[ember] the steps in flight did not land: %s\n", e.what());
  }
  for (const StepInFlight& step : steps_in_flight_) {
    for (const ScheduledChunk& c : step.chunks) c.seq->chunks_in_flight = 0;
  }
  steps_in_flight_.clear();
}

}  // namespace ember
