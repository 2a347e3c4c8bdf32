// What a client asks the serving engine for, and what flows back to it. A RequestStream is the
// only thing the HTTP layer and the engine thread share: the engine pushes events, the handler
// pops them (or cancels, e.g. when its client disconnects).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ember/engine/sampling/sampler.h"
#include "ember/engine/token_constraint.h"
#include "ember/model/forward_observer.h"

namespace ember {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  SamplingParams sampling;
  // Tokens to generate; -1: min(256, what the context leaves after the prompt). 0 runs the prompt
  // only (with prompt_logits: scoring). LLMEngine decides the rest (see its add_request).
  int64_t max_tokens = -1;
  // false: a prompt + max_tokens past the context is refused at arrival. true: it is accepted and
  // generation ends (finish reason "length") when the context is full (ember run).
  bool stop_at_context = false;
  std::vector<std::string> stop;  // stop strings (matched across token boundaries)
  bool ignore_eos = false;
  // End-of-generation tokens (EOS, end-of-turn) cannot be sampled before this many tokens were
  // generated (vLLM's min_tokens); stop strings still apply.
  int64_t min_tokens = 0;
  // Grammar-constrained decoding (response_format, grammar, forced tool calls): only the tokens it
  // allows are sampled, end-of-generation only once it can end. Requests with one never
  // speculate. Stateful: one per request.
  std::shared_ptr<TokenConstraint> constraint;
  // false: never speculate for this request (the server's "speculative": false), even when the
  // engine has a proposer.
  bool speculative = true;
  int32_t logprobs = -1;       // >= 0: report the chosen token's logprob (+ top-N alternatives)
  bool prompt_logits = false;  // events carry the logits of every prompt position (scoring)
  // >= 0: events carry the logprob of every prompt token after the first, each given the tokens
  // before it (+ top-N alternatives): the completions API's echo with logprobs.
  int32_t prompt_logprobs = -1;
  // Events carry the final hidden states of every prompt position [n, d_model] (after the last
  // norm), in order over the events: /v1/embeddings pools them.
  bool prompt_hidden = false;
  // Prompt rows (logits, logprobs or hidden states) are wanted. With prompt_logprobs the prompt is
  // computed whole, never taken from the prefix cache; prompt_logits rows start after a cached
  // prefix.
  bool wants_prompt_rows() const { return prompt_logits || prompt_logprobs >= 0 || prompt_hidden; }
  bool wants_prompt_logit_rows() const { return prompt_logits || prompt_logprobs >= 0; }
  // SentencePiece: drop the space a leading '▁' stands for from the first text (a prompt that is
  // only BOS, as llama.cpp prints it).
  bool strip_leading_space = false;
  // ember trace: the forward passes of this request's steps are shown to `observer` (its rows of
  // each batch: Batch::observed_sequence). Such a request computes its whole prompt (no prefix
  // from the cache or a session) and never speculates; the engine observes one request per step
  // (a second one observed in the same step runs unobserved in it).
  std::shared_ptr<ForwardObserver> observer;
  // Nonzero: when this request finishes, its K/V stays cached for the session, and the session's
  // next request starts from the longest token prefix it shares with it (as llama.cpp's server
  // slots do: a chat's turns re-send the whole conversation). LLMEngine::end_session frees it.
  int64_t session = 0;
};

enum class FinishReason : uint8_t { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top-N alternatives (token, logprob)
};

// The log-softmax of `token` in `logits` and of the `top_n` most likely ids (ties: the lower id).
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int32_t top_n);

// One increment of a request's output.
struct StreamEvent {
  std::string text;             // new text (complete UTF-8; stop strings held back/removed)
  std::vector<int32_t> tokens;  // the tokens this event covers
  std::vector<TokenLogprob> logprobs;
  // With GenerationRequest::prompt_logits: logits [n, vocab] of the next n prompt positions (each
  // row predicts the token after its position), in order over the events.
  std::vector<float> prompt_logits;
  // With GenerationRequest::prompt_logprobs: prompt tokens 1, 2, ... in order over the events.
  std::vector<TokenLogprob> prompt_logprobs;
  // With GenerationRequest::prompt_hidden: hidden states [n, d_model] of the next n prompt
  // positions.
  std::vector<float> prompt_hidden;
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
