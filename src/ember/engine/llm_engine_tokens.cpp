// LLMEngine's side of a sampled token (llm_engine.h): the sampler's pick for a sequence's logits
// row, the token appended and streamed (text, logprobs, timing), and a sequence finished at EOS,
// a stop string, max_tokens or the context.
#include <algorithm>
#include <cmath>

#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"

namespace ember {

void LLMEngine::sample_next(Sequence& s, std::span<const float> logits) {
  if (s.n_generated() >= s.max_tokens) {  // max_tokens 0: the prompt only (scoring)
    finish(&s, FinishReason::Length);
    return;
  }
  int32_t token = -1;
  try {
    if (&s == observed_ && step_observer_ != nullptr) {  // ember trace: before the token goes out
      const auto start = Sequence::Clock::now();
      token = sample_token(s, logits, s.tokens.size());
      step_observer_->op({OpGroup::Sampling, "sampling",
                          seconds_between(start, Sequence::Clock::now()), 0,
                          static_cast<double>(logits.size() * sizeof(float))});
    } else {
      token = sample_token(s, logits, s.tokens.size());
    }
  } catch (const Error& e) {
    if (!s.request.constraint) throw;
    finish(&s, FinishReason::Error, e.what());  // this request's grammar, not the engine's fault
    return;
  }
  emit_token(s, token, logits);
}

std::span<const int32_t> LLMEngine::banned_after(const Sequence& s, size_t history) const {
  const GenerationRequest& req = s.request;
  // min_tokens: the end-of-generation tokens are held back until enough were generated.
  const bool hold_end =
      static_cast<int64_t>(history) - s.n_prompt < req.min_tokens && !req.ignore_eos;
  return hold_end ? std::span<const int32_t>(end_of_generation_) : std::span<const int32_t>();
}

int32_t LLMEngine::sample_token(Sequence& s, std::span<const float> logits, size_t history) {
  TokenConstraint* constraint = s.request.constraint.get();
  if (constraint == nullptr) {
    return s.sampler->sample(logits, std::span<const int32_t>(s.tokens).first(history),
                             static_cast<size_t>(s.n_prompt), banned_after(s, history));
  }
  // Only what the grammar allows; end-of-generation once it is complete.
  constraint->allowed_tokens(s.allowed);
  s.allowed.resize(logits.size(), 0);
  const bool can_end = constraint->can_end();
  for (int32_t t : end_of_generation_) {
    if (t >= 0 && static_cast<size_t>(t) < s.allowed.size())
      s.allowed[static_cast<size_t>(t)] = can_end;
  }
  if (std::find(s.allowed.begin(), s.allowed.end(), 1) == s.allowed.end()) {
    throw Error(ErrorKind::InvalidArgument,
                "grammar: no token of the vocabulary can continue the constrained output");
  }
  s.sampler->set_allowed(&s.allowed);
  const int32_t token =
      s.sampler->sample(logits, std::span<const int32_t>(s.tokens).first(history),
                        static_cast<size_t>(s.n_prompt), banned_after(s, history));
  s.sampler->set_allowed(nullptr);
  if (std::find(end_of_generation_.begin(), end_of_generation_.end(), token) ==
      end_of_generation_.end()) {
    constraint->accept(token);
  }
  return token;
}

bool LLMEngine::emit_token(Sequence& s, int32_t token, std::span<const float> logits) {
  const GenerationRequest& req = s.request;
  const auto now = Sequence::Clock::now();
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    if (s.n_generated() == 0) {
      metrics_.ttft_seconds.observe(seconds_between(s.arrival_time, now));
    } else {
      metrics_.inter_token_seconds.observe(seconds_between(s.last_token_time, now));
    }
  }
  if (s.n_generated() == 0) s.first_token_time = now;
  s.last_token_time = now;
  const bool ends = std::find(end_of_generation_.begin(), end_of_generation_.end(), token) !=
                    end_of_generation_.end();
  if (ends && !req.ignore_eos) {
    finish(&s, FinishReason::Stop);
    return false;
  }
  StreamEvent e;
  e.tokens.push_back(token);
  if (req.logprobs >= 0) e.logprobs.push_back(logprob_of(logits, token, req.logprobs));
  s.tokens.push_back(token);
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.generation_tokens_total;
  }
  bool stopped = false;
  e.text = s.detokenizer.push(token, &stopped);
  s.stream->push(std::move(e));
  if (stopped) {
    finish(&s, FinishReason::Stop);
    return false;
  }
  if (s.n_generated() >= s.max_tokens ||
      static_cast<int64_t>(s.tokens.size()) >= max_request_tokens()) {
    finish(&s, FinishReason::Length);
    return false;
  }
  return true;
}

void LLMEngine::finish(Sequence* s, FinishReason reason, const std::string& error) {
  StreamEvent e;
  e.finished = true;
  e.finish_reason = reason;
  e.error = error;
  if (reason != FinishReason::Cancelled) {
    e.text = s->detokenizer.flush();
    if (s->detokenizer.stopped()) e.finish_reason = FinishReason::Stop;
  }
  e.prompt_tokens = s->n_prompt;
  e.completion_tokens = s->n_generated();
  e.cached_prompt_tokens = s->cached_prompt_tokens;
  {  // counted before the client hears of it (see step())
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.requests_finished;
    if (reason == FinishReason::Cancelled) ++metrics_.requests_cancelled;
  }
  s->stream->push(std::move(e));
  if (draft_) draft_->forget(s->id);
  // Frees the blocks (or keeps them for the request's session); the sequence is destroyed here.
  if (s->request.session != 0 && (reason == FinishReason::Stop || reason == FinishReason::Length)) {
    keep_session(s);
  } else {
    scheduler_.remove(s);
  }
}

}  // namespace ember
