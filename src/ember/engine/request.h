// What a client asks the serving engine for, and what flows back to it. A RequestStream is the
// only thing the HTTP layer and the engine thread share: the engine pushes events, the handler
// pops them (or cancels, e.g. when its client disconnects).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ember/engine/sampler.h"

namespace ember {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (matched across token boundaries)
  bool ignore_eos = false;
  float presence_penalty = 0.0f;   // OpenAI-style, subtracted once per seen token
  float frequency_penalty = 0.0f;  // OpenAI-style, times the token's count so far
  int32_t logprobs = -1;           // >= 0: report the chosen token's logprob (+ top-N alternatives)
};

enum class FinishReason : uint8_t { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top-N alternatives (token, logprob)
};

// One increment of a request's output.
struct StreamEvent {
  std::string text;             // new text (complete UTF-8; stop strings held back/removed)
  std::vector<int32_t> tokens;  // the tokens this event covers
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string error;          // set when finish_reason == Error
  int64_t prompt_tokens = 0;  // filled on the final event
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};

class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }

  void push(StreamEvent event);
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<StreamEvent> pop(std::chrono::milliseconds timeout);
  // Asks the engine to stop this request and free its blocks at its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  int64_t id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace ember
