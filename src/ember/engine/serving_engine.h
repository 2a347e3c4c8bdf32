// The serving loop: many requests share one model, one KV pool and one forward step. submit()
// (any thread) queues a request and returns its stream; the engine thread schedules, runs the
// step, samples, detokenizes, applies stop conditions and pushes events. HTTP handlers never
// touch model state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ember/engine/engine.h"
#include "ember/engine/metrics.h"
#include "ember/engine/request.h"
#include "ember/engine/scheduler.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

struct ServingOptions {
  EngineOptions engine;       // threads, context, KV pool size, prefix caching
  SchedulerConfig scheduler;  // token budget, max sequences
  int64_t max_waiting = 256;  // queued requests beyond this are refused (HTTP 429)
};

// Why submit() refused a request.
enum class SubmitError : uint8_t { None, QueueFull, ShuttingDown, TooLong, EmptyPrompt };

class ServingEngine {
 public:
  ServingEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
                const ServingOptions& options);
  ~ServingEngine();

  // Queues a request. On refusal returns null and sets *error (and *message).
  std::shared_ptr<RequestStream> submit(GenerationRequest request, SubmitError* error,
                                        std::string* message);

  // Runs the loop on a background thread.
  void start();
  // Stops accepting; finishes in-flight requests (or cancels them when `cancel_in_flight`),
  // then joins the loop thread.
  void shutdown(bool cancel_in_flight);

  // One scheduling + forward step on the caller's thread (for tests; do not mix with start()).
  // Returns false when there was nothing to do.
  bool step();

  ServingMetrics metrics() const;
  int64_t max_context() const { return engine_.max_context(); }
  // Largest prompt + max_tokens one request may ask for.
  int64_t max_request_tokens() const;
  const Engine& engine() const { return engine_; }

 private:
  void loop();
  void admit_inbox();
  void drop_cancelled();
  void handle_token(SequenceState& s, std::span<const float> logits);
  void finish(SequenceState* s, FinishReason reason, const std::string& error = "");
  void update_gauges();

  const Tokenizer* tokenizer_;
  ServingOptions options_;
  Engine engine_;
  Scheduler scheduler_;

  mutable std::mutex mutex_;  // guards inbox_, metrics_, accepting_
  std::condition_variable wake_;
  std::vector<std::unique_ptr<SequenceState>> inbox_;
  ServingMetrics metrics_;
  bool accepting_ = true;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_all_{false};
  std::thread thread_;
  int64_t next_id_ = 1;
  uint64_t next_arrival_ = 0;
  std::vector<float> penalised_;  // scratch row for presence/frequency penalties
};

}  // namespace ember
