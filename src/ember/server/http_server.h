// The OpenAI-compatible HTTP front end of a AsyncEngine. Handlers only tokenize, enqueue and
// relay their request's event stream: the engine thread alone touches the model. Streaming
// responses are server-sent events written as chunks; a failed write means the client is gone,
// and the request is cancelled so its KV blocks return to the pool.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ember/engine/async_engine.h"
#include "ember/server/connection_limits.h"
#include "ember/server/openai_api.h"
#include "ember/server/trace_store.h"
#include "ember/tokenizer/chat_template.h"
#include "ember/tokenizer/tokenizer.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace ember::grammar {
struct TokenTrie;
}

namespace ember::server {

struct Relay;
struct Choice;
class GuardedHttpServer;
class RequestGuard;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (see bind())
  std::string model_id = "ember";       // what /v1/models lists and responses echo
  size_t max_body_bytes = 16u << 20;    // larger bodies get 413 before any parsing (--max-body)
  int http_threads = 0;                 // 0: connections.max_connections + 8
  double drain_timeout_seconds = 10.0;  // on shutdown, how long in-flight requests may finish
  // Non-empty: every endpoint but /health wants `Authorization: Bearer <api_key>` (401 otherwise).
  std::string api_key;
  // Refuse (400) request fields that no API knows instead of ignoring them with a warning.
  bool strict_api = false;
  // Origins whose pages may call the server (CORS; "*" for any); empty: CORS off, and a loopback
  // server refuses requests from other sites' pages.
  std::vector<std::string> cors_origins;
  // TLS: PEM certificate (chain) and private key; both empty: plain HTTP.
  std::string ssl_cert;
  std::string ssl_key;
  // Requests may ask for "trace": true (ember trace of their forward passes, GET /trace/{id});
  // off: such a request is refused (400). The machine's ceilings for the traces' rooflines.
  bool allow_trace = false;
  TraceMachine trace_machine;
  // The connection cap, header/body deadlines and limits, plain or TLS (guarded_http_server.h).
  ConnectionLimits connections;
};

class HttpServer {
 public:
  HttpServer(AsyncEngine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template,
             ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options.port == 0).
  // Throws ember::Error when the address cannot be bound.
  int bind();
  // Accepts connections until shutdown() completes. Call after bind().
  void serve();
  // Graceful stop (any thread): new requests get 503, in-flight ones get up to the drain timeout
  // to finish (or until force_stop()), the rest are cancelled, then the listener closes and
  // serve() returns.
  void shutdown();
  // Makes a running shutdown() cancel in-flight requests now (a second SIGINT).
  void force_stop() { force_.store(true); }

  bool draining() const { return draining_.load(); }
  int64_t active_requests() const { return active_.load(); }

 private:
  friend struct ActiveRequest;

  void route();
  // A generation request end to end; every refusal or failure on the way is an ember::Error
  // that becomes one OpenAI-style error response.
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The prompt as token ids; refuses (throws) prompts that cannot fit the context.
  std::vector<int32_t> tokenize_prompt(const ApiRequest& api) const;
  // A chat request's conversation through the chat template (tools, chat_template_kwargs and the
  // tokenizer's BOS/EOS spelling passed as transformers passes them).
  ChatPrompt render_chat(const ApiRequest& api) const;
  std::string finish_stream_choice(Relay& relay, Choice& choice, int64_t index) const;
  // The request's grammar (response_format, grammar, or tool_choice required / named) compiled
  // for this vocabulary; identical grammars share one (and its mask cache). Null without one.
  std::shared_ptr<const grammar::CompiledGrammar> compile_grammar(ApiRequest& api);
  // The request's max_tokens, or the default; throws when prompt + completion exceed the context.
  // Hands the request to the engine; a refusal comes back as a thrown Error.
  std::shared_ptr<Relay> submit(ApiRequest api, std::vector<int32_t> prompt);
  void respond_whole(Relay& relay, httplib::Response& res) const;
  void respond_stream(const std::shared_ptr<Relay>& relay, httplib::Response& res) const;
  // The SSE events for whatever the engine produced since the last call.
  std::string next_events(Relay& relay) const;
  void handle_models(httplib::Response& res) const;
  void handle_embeddings(const httplib::Request& req, httplib::Response& res);
  void handle_metrics(httplib::Response& res) const;
  // ember trace (http_trace.cpp): GET /trace/{id}; a traced request's recorder and its end.
  void handle_trace_page(const httplib::Request& req, httplib::Response& res);
  void start_trace(Relay& relay, GenerationRequest& choice0);
  void finish_trace(const Relay& relay) const;
  void count_response(int status);

  AsyncEngine& engine_;
  const Tokenizer& tokenizer_;
  ChatTemplate chat_template_;
  ToolCallFormat tool_format_;  // how this model writes tool calls (from its template)
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<RequestGuard> guard_;   // API key, Host/Origin, CORS (request_guard.h)
  GuardedHttpServer* guarded_ = nullptr;  // http_, as what it is
  std::unique_ptr<TraceStore> traces_;    // with allow_trace
  size_t max_piece_bytes_ = 1;  // longest token's bytes: bounds tokens-per-byte for a quick check
  int64_t created_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> force_{false};
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> next_id_{1};
  std::mutex grammar_mutex_;
  std::shared_ptr<const grammar::TokenTrie> token_trie_;  // built on the first grammar
  std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> grammars_;
  mutable std::mutex counts_mutex_;
  std::map<int, uint64_t> responses_by_status_;
};

}  // namespace ember::server
