#include "ember/engine/async_engine.h"

#include <cstdio>

#include "ember/core/error.h"

namespace ember {

AsyncEngine::AsyncEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
                         const AsyncEngineOptions& options)
    : options_(options), engine_(weights, tokenizer, options.engine) {}

AsyncEngine::~AsyncEngine() {
  shutdown(/*cancel_in_flight=*/true);
}

std::shared_ptr<RequestStream> AsyncEngine::submit(GenerationRequest request) {
  std::unique_ptr<Sequence> seq = engine_.make_sequence(std::move(request));
  std::shared_ptr<RequestStream> stream = seq->stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) {
      throw Error(ErrorKind::Unavailable, "the server is shutting down")
          .with_reason("shutting_down");
    }
    if (engine_.metrics().waiting + static_cast<int64_t>(inbox_.size()) >= options_.max_waiting) {
      ++rejected_;
      throw Error(ErrorKind::ResourceExhausted, "too many requests are waiting; try again later")
          .with_reason("queue_full");
    }
    inbox_.push_back(std::move(seq));
  }
  wake_.notify_all();
  return stream;
}

void AsyncEngine::admit_inbox() {
  std::vector<std::unique_ptr<Sequence>> incoming;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(inbox_);
  }
  for (auto& s : incoming) engine_.add(std::move(s));
}

bool AsyncEngine::step() {
  admit_inbox();
  if (cancel_all_.load()) engine_.finish_all(FinishReason::Cancelled);
  return engine_.step();
}

ServingMetrics AsyncEngine::metrics() const {
  ServingMetrics m = engine_.metrics();
  std::lock_guard<std::mutex> lock(mutex_);
  m.requests_rejected = rejected_;
  return m;
}

void AsyncEngine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void AsyncEngine::loop() {
  for (;;) {
    bool worked = false;
    try {
      worked = step();
    } catch (const std::exception& ex) {
      // A failed step must not leave clients hanging: fail everything in flight.
      std::fprintf(stderr, "[ember] engine step failed: %s\n", ex.what());
      engine_.finish_all(FinishReason::Error, ex.what());
    }
    if (worked) continue;
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_.load() && inbox_.empty() && engine_.idle()) return;
    wake_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return !inbox_.empty() || stop_.load(); });
  }
}

void AsyncEngine::shutdown(bool cancel_in_flight) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
  }
  if (cancel_in_flight) cancel_all_.store(true);
  stop_.store(true);
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ember
