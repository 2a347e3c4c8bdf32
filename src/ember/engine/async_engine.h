// LLMEngine on a thread of its own, for the server: submit() (any thread) validates and queues a
// request and returns its stream at once; the engine thread admits queued requests between steps
// and runs the loop. HTTP handlers never touch model state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ember/engine/llm_engine.h"

namespace ember {

struct AsyncEngineOptions {
  LLMEngineOptions engine;
  int64_t max_waiting = 256;  // queued requests beyond this are refused (HTTP 503)
};

class AsyncEngine {
 public:
  AsyncEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
              const AsyncEngineOptions& options);
  ~AsyncEngine();

  // Queues a request and returns its stream. Throws ember::Error when refused: what
  // LLMEngine::make_sequence refuses, ResourceExhausted ("queue_full") when too many wait,
  // Unavailable ("shutting_down") after shutdown().
  std::shared_ptr<RequestStream> submit(GenerationRequest request);

  // Runs the loop on a background thread.
  void start();
  // Stops accepting; finishes in-flight requests (or cancels them when `cancel_in_flight`), then
  // joins the loop thread.
  void shutdown(bool cancel_in_flight);
  // One admit + step on the caller's thread (tests; do not mix with start()). False when idle.
  bool step();

  ServingMetrics metrics() const;
  const LLMEngine& engine() const { return engine_; }
  int64_t max_request_tokens() const { return engine_.max_request_tokens(); }

 private:
  void loop();
  void admit_inbox();

  AsyncEngineOptions options_;
  LLMEngine engine_;
  mutable std::mutex mutex_;  // guards inbox_, accepting_, rejected_
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  bool accepting_ = true;
  uint64_t rejected_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_all_{false};
  std::thread thread_;
};

}  // namespace ember
