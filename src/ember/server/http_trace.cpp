// HttpServer's side of ember trace: a request with "trace": true (servers started with
// --allow-trace) gets a TraceRecorder on its first choice, its id in the X-Ember-Trace-Id header
// (and "trace_id" in a non-streamed body), and GET /trace/{id} serves the page once the request
// finished (409 while it runs or when it was cancelled before the end, 404 once dropped).
#include <httplib.h>

#include "ember/server/error_response.h"
#include "ember/server/http_server.h"
#include "ember/server/relay.h"

namespace ember::server {

void HttpServer::start_trace(Relay& relay, GenerationRequest& choice0) {
  auto [id, recorder] = traces_->start(engine_.engine().runner().weights().config,
                                       static_cast<int64_t>(choice0.prompt.size()));
  choice0.observer = std::move(recorder);
  relay.trace_id = std::move(id);
}

// Only once every choice has its final event: the engine is done with the recorder then.
void HttpServer::finish_trace(const Relay& relay) const {
  if (relay.trace_id.empty() || !relay.done || relay.choices.empty()) return;
  const Completion& c = relay.choices[0].acc;
  traces_->finish(relay.trace_id, static_cast<int64_t>(c.tokens.size()),
                  c.tokens.empty() ? -1 : c.tokens.back());
}

void HttpServer::handle_trace_page(const httplib::Request& req, httplib::Response& res) {
  if (traces_ == nullptr) {
    throw Error(ErrorKind::NotFound, "traces are off: start the server with --allow-trace");
  }
  const std::string id = req.matches[1];
  std::string html;
  switch (traces_->page(id, &html)) {
    case TraceStore::Status::Unknown:
      throw Error(ErrorKind::NotFound, "no trace '" + id + "' (the server keeps the last " +
                                           std::to_string(TraceStore::kMaxTraces) + ")");
    case TraceStore::Status::Running:
      res.status = 409;
      res.set_content(dump_json(nlohmann::json{
                          {"error",
                           {{"message", "trace '" + id +
                                            "' has no page: its request has not finished (or "
                                            "was cancelled before the end)"},
                            {"type", "invalid_request_error"},
                            {"param", nullptr},
                            {"code", "trace_not_ready"}}}}),
                      "application/json");
      return;
    case TraceStore::Status::Ready:
      break;
  }
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                 "img-src data:");
  res.set_content(html, "text/html; charset=utf-8");
}

}  // namespace ember::server
