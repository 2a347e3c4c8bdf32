// HttpServer's responses: a whole JSON body once every choice finished, or server-sent events
// as tokens arrive (with tools, text that could begin a call is held until the reply ends).
#include <httplib.h>

#include <chrono>

#include "ember/server/error_response.h"
#include "ember/server/guarded_http_server.h"
#include "ember/server/relay.h"

namespace ember::server {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

void send_body(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump_json(j), "application/json");
}

}  // namespace

void HttpServer::respond_whole(Relay& relay, httplib::Response& res) const {
  std::vector<Completion> results;
  // The client is checked every 20 ms whether events come or not: tokens that come faster than
  // that (a small model on a fast machine) must not hide a client that left.
  auto next_check = std::chrono::steady_clock::now() + 20ms;
  for (Choice& choice : relay.choices) {
    while (!choice.done) {
      std::optional<StreamEvent> e = choice.pop(20ms);
      if (!e || std::chrono::steady_clock::now() >= next_check) {
        next_check = std::chrono::steady_clock::now() + 20ms;
        // Nobody will read this answer: stop generating it (its KV blocks go back).
        if (current_client_gone()) {
          relay.cancel();
          finish_trace(relay);
          res.status = 499;  // nginx's "client closed request": not a server error
          return;
        }
        if (!e) continue;
      }
      choice.absorb(*e);
      choice.done = e->finished;
      if (e->finished && e->finish_reason == FinishReason::Error) {
        relay.cancel();
        throw Error(ErrorKind::Internal, e->error);
      }
      if (e->finished && e->finish_reason == FinishReason::Cancelled) {
        relay.cancel();
        throw shutting_down("the request was cancelled: the server is shutting down");
      }
    }
    results.push_back(choice.acc);
  }
  relay.done = true;
  finish_trace(relay);
  auto body = completion_response(relay.api, relay.meta, results, tokenizer_);
  if (!relay.trace_id.empty()) body["trace_id"] = relay.trace_id;  // ember extension
  send_body(res, body);
}

void HttpServer::respond_stream(const std::shared_ptr<Relay>& relay, httplib::Response& res) const {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, relay](size_t /*offset*/, httplib::DataSink& sink) {
        std::string out = next_events(*relay);
        // The trace is complete before [DONE] reaches the client, which may ask for it at once.
        if (relay->done) finish_trace(*relay);
        // A failed write is how a vanished client shows itself: stop generating for it.
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          relay->cancel();
          return false;
        }
        if (relay->done) sink.done();
        return true;
      },
      [this, relay](bool success) {
        if (!success || !relay->done) relay->cancel();
        finish_trace(*relay);
      });
}

std::string HttpServer::next_events(Relay& relay) const {
  std::string out;
  if (!relay.started) {
    relay.started = true;
    if (relay.api.endpoint == Endpoint::ChatCompletions) {
      for (size_t i = 0; i < relay.choices.size(); ++i) {
        out += chat_role_chunk(relay.api, relay.meta, static_cast<int64_t>(i));
      }
    }
  }
  if (relay.api.echo && !relay.echo_sent) {
    // Echo goes first, once choice 0's prompt logprobs are complete: they arrive in events
    // without tokens ahead of its first token (or its end); that event is held for the loop below.
    Choice& first = relay.choices[0];
    while (true) {
      std::optional<StreamEvent> e = first.pop(100ms);
      if (!e) return out;
      if (!e->tokens.empty() || e->finished) {
        first.held = std::move(e);
        break;
      }
      first.absorb(*e);
    }
    for (size_t i = 0; i < relay.choices.size(); ++i) {
      out += echo_chunk(relay.api, relay.meta, first.acc.prompt_logprobs, tokenizer_,
                        static_cast<int64_t>(i));
    }
    relay.echo_sent = true;
  }
  // Text offsets of the generated tokens count the echoed prompt before them.
  const auto echo_bytes =
      relay.api.echo ? static_cast<int64_t>(echo_text(relay.api, tokenizer_).size()) : 0;
  // Wait briefly for the next event of the first unfinished choice, then take whatever else is
  // already queued, so one write carries every token the engine produced since the last one.
  for (size_t i = 0; i < relay.choices.size(); ++i) {
    Choice& choice = relay.choices[i];
    const auto index = static_cast<int64_t>(i);
    if (choice.done) continue;
    std::optional<StreamEvent> e = choice.pop(out.empty() ? 100ms : 0ms);
    while (e) {
      int64_t offset = echo_bytes + static_cast<int64_t>(choice.acc.text.size());
      std::string text = choice.absorb(*e);
      if (relay.api.tools.active()) text = choice.release_content(relay.api.tool_format);
      if (!text.empty() || !e->logprobs.empty()) {
        out += delta_chunk(relay.api, relay.meta, text, e->logprobs, tokenizer_, offset, index);
      }
      if (e->finished) {
        choice.done = true;
        if (e->finish_reason == FinishReason::Error) {
          // The status line is long gone: the error travels as an event in the same JSON shape.
          out += sse_data(to_openai_error(Error(ErrorKind::Internal, e->error)).body);
        } else {
          out += finish_stream_choice(relay, choice, index);
        }
        break;
      }
      e = choice.pop(0ms);
    }
  }
  if (std::all_of(relay.choices.begin(), relay.choices.end(),
                  [](const Choice& c) { return c.done; })) {
    relay.done = true;
    if (relay.api.include_usage) {
      std::vector<Completion> accs;
      for (const Choice& c : relay.choices) accs.push_back(c.acc);
      out += usage_chunk(relay.api, relay.meta, total_usage(accs));
    }
    out += sse_done();
  }
  return out;
}

// The end of a streamed choice: with tools, the held tail is parsed into calls (sent as one
// delta.tool_calls chunk) and whatever content it also held; then the finish chunk.
std::string HttpServer::finish_stream_choice(Relay& relay, Choice& choice, int64_t index) const {
  std::string out;
  bool calls = false;
  if (relay.api.tools.active() && choice.sent < choice.acc.text.size()) {
    const std::string tail = choice.acc.text.substr(choice.sent);
    ParsedReply reply = parse_tool_calls(relay.api.tool_format, tail, *relay.api.tools.tools,
                                         tool_call_id_seed(relay.meta, index));
    if (!reply.calls.empty() && !relay.api.tools.parallel) reply.calls.resize(1);
    if (!reply.content.empty()) {
      out += delta_chunk(relay.api, relay.meta, reply.content, {}, tokenizer_, 0, index);
    }
    if (!reply.calls.empty()) out += tool_calls_chunk(relay.api, relay.meta, reply.calls, index);
    calls = !reply.calls.empty() && choice.acc.finish_reason == FinishReason::Stop;
    choice.sent = choice.acc.text.size();
  }
  return out + finish_chunk(relay.api, relay.meta, choice.acc.finish_reason, index, calls);
}

}  // namespace ember::server
