// What the HTTP handlers keep for one response while the engine produces it: the request's
// in-flight count, each choice's stream and accumulated completion, and how far streaming got.
// Shared by http_server.cpp (handlers) and http_responses.cpp (whole and streamed responses).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/server/http_server.h"

namespace ember::server {

// Counts a request as in flight for as long as it (or its stream) lives, so shutdown() can wait
// for streams still being written after their handler returned.
struct ActiveRequest {
  explicit ActiveRequest(HttpServer* s) : server(s) { server->active_.fetch_add(1); }
  ~ActiveRequest() { server->active_.fetch_sub(1); }
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;
  HttpServer* server;
};

// One choice of a response: its engine stream and what it has produced so far.
struct Choice {
  std::shared_ptr<RequestStream> stream;
  Completion acc;
  std::optional<StreamEvent> held;  // popped early (the wait for choice 0's prefill), not yet used
  bool done = false;

  std::optional<StreamEvent> pop(std::chrono::milliseconds timeout) {
    if (held) {
      std::optional<StreamEvent> e = std::move(held);
      held.reset();
      return e;
    }
    return stream->pop(timeout);
  }

  // With tools: the content that may be streamed now (text that could begin a tool call is held
  // until the reply ends; see streamable_prefix).
  std::string release_content(ToolCallFormat format) {
    size_t upto = std::max(streamable_prefix(format, acc.text), sent);
    std::string text = acc.text.substr(sent, upto - sent);
    sent = upto;
    return text;
  }
  size_t sent = 0;  // bytes of acc.text streamed as content (tools only)

  // Folds one event into `acc`; returns its text.
  std::string absorb(StreamEvent& e) {
    std::string text = std::move(e.text);
    acc.text += text;
    acc.tokens.insert(acc.tokens.end(), e.tokens.begin(), e.tokens.end());
    acc.logprobs.insert(acc.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    acc.prompt_logprobs.insert(acc.prompt_logprobs.end(), e.prompt_logprobs.begin(),
                               e.prompt_logprobs.end());
    if (e.finished) {
      acc.finish_reason = e.finish_reason;
      acc.prompt_tokens = e.prompt_tokens;
      acc.completion_tokens = e.completion_tokens;
      acc.cached_prompt_tokens = e.cached_prompt_tokens;
    }
    return text;
  }
};

// One response: its n choices (n > 1: choice i samples with seed + i) and how far the stream got.
struct Relay {
  ApiRequest api;
  ResponseMeta meta;
  std::vector<Choice> choices;
  std::shared_ptr<ActiveRequest> active;
  bool started = false;
  bool echo_sent = false;  // streamed echo: the prompt chunks went out
  bool done = false;
  std::string trace_id;  // "trace": true: its id in the server's TraceStore

  void cancel() {
    for (Choice& c : choices) c.stream->cancel();
  }
};

// 503 with the reason clients see while the server drains.
inline Error shutting_down(const std::string& message) {
  return Error(ErrorKind::Unavailable, message).with_reason("shutting_down");
}

}  // namespace ember::server
