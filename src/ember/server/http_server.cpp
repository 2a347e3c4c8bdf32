#include "ember/server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "ember/core/error.h"
#include "ember/engine/grammar/grammar_constraint.h"
#include "ember/server/embeddings_api.h"
#include "ember/server/error_response.h"
#include "ember/server/guarded_http_server.h"
#include "ember/server/relay.h"
#include "ember/server/request_guard.h"
#include "ember/server/tokenize_api.h"
#include "ember/server/vllm_metrics.h"

namespace ember::server {

extern const char* const kChatPageHtml;  // generated from web/chat.html (cmake/embed_file.cmake)

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Plain HTTP or, with --ssl-cert/--ssl-key, HTTPS: the same guarded connection handling.
std::unique_ptr<httplib::Server> make_http_server(const ServerOptions& o) {
  if (o.ssl_cert.empty() != o.ssl_key.empty()) {
    throw Error(ErrorKind::InvalidArgument, "TLS needs both --ssl-cert and --ssl-key");
  }
  std::unique_ptr<TlsContext> tls;
  if (!o.ssl_cert.empty()) tls = std::make_unique<TlsContext>(o.ssl_cert, o.ssl_key);
  return std::make_unique<GuardedHttpServer>(o.connections, std::move(tls));
}

void send(httplib::Response& res, const ErrorResponse& e) {
  res.status = e.status;
  // A full queue or a draining server: worth retrying shortly.
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(e.body), "application/json");
}

void send_error(httplib::Response& res, const Error& e) {
  send(res, to_openai_error(e));
}

void send_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump_json(j), "application/json");
}

// A request whose prompt (+ completion) cannot fit the context: the client's to fix, so a 400
// naming the field, with the code OpenAI's clients look for.
Error too_long(const std::string& field, const std::string& message) {
  return Error::invalid_request(field, message).with_reason("context_length_exceeded");
}

// Errors httplib raises before (or instead of) a handler: an unmatched route, a body over the
// size limit, a malformed HTTP request.
Error transport_error(const httplib::Request& req, int status) {
  if (status == 404) {
    return Error(ErrorKind::NotFound, "no route for " + req.method + " " + req.path)
        .with_reason("not_found");
  }
  if (status == 413) {
    return Error(ErrorKind::InvalidArgument, "the request body is too large")
        .with_reason("request_too_large");
  }
  return Error(status >= 500 ? ErrorKind::Internal : ErrorKind::InvalidArgument,
               "HTTP error " + std::to_string(status));
}

}  // namespace

HttpServer::HttpServer(AsyncEngine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template,
                       ServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      tool_format_(tool_call_format_for_template(chat_template_.source())),
      options_(std::move(options)),
      http_(make_http_server(options_)),
      guard_(std::make_unique<RequestGuard>(
          GuardOptions{options_.host, options_.api_key, options_.cors_origins})),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
    max_piece_bytes_ = std::max(max_piece_bytes_, tokenizer_.token_bytes(id).size());
  }
  // Every connection holds a worker thread for its whole life (a streaming request for minutes),
  // so the pool is sized above the connection cap: a connection under the cap never waits for a
  // thread (which is how slow clients used to starve /health), one over it is refused at once.
  int threads = options_.http_threads;
  if (threads <= 0) threads = static_cast<int>(options_.connections.max_connections + 8);
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->set_payload_max_length(options_.max_body_bytes);
  guarded_ = dynamic_cast<GuardedHttpServer*>(http_.get());
  if (options_.allow_trace) {
    const LLMEngine& engine = engine_.engine();
    TraceContext context;
    context.model_name = options_.model_id;
    context.weight_dtype = dtype_name(engine.runner().weights().matrix_dtype());
    context.kv = engine.runner().kv_shape_of_every_layer();
    context.tokenizer = &tokenizer_;
    context.machine = options_.trace_machine;
    traces_ = std::make_unique<TraceStore>(std::move(context));
  }
  route();
}

HttpServer::~HttpServer() = default;

void HttpServer::count_response(int status) {
  std::lock_guard<std::mutex> lock(counts_mutex_);
  ++responses_by_status_[status];
}

void HttpServer::route() {
  // --api-key: checked before routing, so no endpoint (or unknown path) answers without it.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return guard_->before_routing(req, res);
  });
  // Every route answers a refused request's refusal once its body is read (request_guard.h).
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  auto guarded = [](Handler handler) {
    return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      if (!RequestGuard::answer_refusal(res)) handler(req, res);
    };
  };
  auto post = [&](const std::string& pattern, Handler handler) {
    http_->Post(pattern, guarded(std::move(handler)));
  };
  auto get = [&](const std::string& pattern, Handler handler) {
    http_->Get(pattern, guarded(std::move(handler)));
  };
  post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::Completions, req, res);
  });
  post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::ChatCompletions, req, res);
  });
  post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, handle_tokenize(tokenizer_, req.body));
  });
  post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, handle_detokenize(tokenizer_, req.body));
  });
  post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    handle_embeddings(req, res);
  });
  // llama.cpp's /apply-template: a chat request body -> {"prompt": the rendered text}.
  post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    auto parsed = parse_request(Endpoint::ChatCompletions, req.body, options_.strict_api);
    if (auto* e = std::get_if<Error>(&parsed)) throw *e;
    const ChatTemplateContext spelling = chat_context_for(tokenizer_);
    send_json(res, json{{"prompt", render_chat(std::get<ApiRequest>(parsed))
                                       .render(spelling.bos_token, spelling.eos_token)}});
  });
  get("/v1/models",
      [this](const httplib::Request&, httplib::Response& res) { handle_models(res); });
  // The chat page (web/chat.html, compiled in): served without the API key, which it asks for.
  get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'");
    res.set_content(kChatPageHtml, "text/html; charset=utf-8");
  });
  get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_.load()) {
      res.status = 503;
      res.set_content(R"({"status":"shutting down"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  get("/metrics", [this](const httplib::Request&, httplib::Response& res) { handle_metrics(res); });
  get(R"(/trace/([A-Za-z0-9-]+))",
      [this](const httplib::Request& req, httplib::Response& res) { handle_trace_page(req, res); });
  // Unmatched routes, 413 for oversized bodies, etc.: OpenAI-style JSON instead of httplib's
  // empty bodies. Handlers' own error responses already have a body and pass through.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (RequestGuard::answer_refusal(res) || !res.body.empty()) return;
    ErrorResponse e = to_openai_error(transport_error(req, res.status));
    e.status = res.status;  // httplib chose it (413, 405, ...) before any handler ran
    send(res, e);
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const Error& e) {
          return send_error(res, e);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        send_error(res, Error(ErrorKind::Internal, what));
      });
  http_->set_logger([this](const httplib::Request&, const httplib::Response& res) {
    RequestGuard::end_of_request();
    count_response(res.status);
  });
}

// Each input runs as a prompt-only request (max_tokens 0) asking for its hidden states; all are
// queued before any is awaited, so the engine batches them.
void HttpServer::handle_embeddings(const httplib::Request& http_req, httplib::Response& res) {
  auto active = std::make_shared<ActiveRequest>(this);
  if (draining_.load()) throw shutting_down("the server is shutting down");
  const int64_t d_model = engine_.engine().runner().weights().config.d_model;
  EmbeddingRequest req =
      parse_embedding_request(http_req.body, tokenizer_, d_model, engine_.max_request_tokens());
  std::vector<std::shared_ptr<RequestStream>> streams;
  int64_t prompt_tokens = 0;
  try {
    for (const std::vector<int32_t>& ids : req.inputs) {
      GenerationRequest g;
      g.prompt = ids;
      g.max_tokens = 0;
      g.prompt_hidden = true;
      g.sampling.temperature = 0.0f;
      prompt_tokens += static_cast<int64_t>(ids.size());
      streams.push_back(engine_.submit(std::move(g)));
    }
    std::vector<std::vector<float>> embeddings;
    for (const auto& stream : streams) {
      std::vector<float> hidden;
      for (bool done = false; !done;) {
        std::optional<StreamEvent> e = stream->pop(1000ms);
        if (!e) continue;
        hidden.insert(hidden.end(), e->prompt_hidden.begin(), e->prompt_hidden.end());
        done = e->finished;
        if (done && e->finish_reason != FinishReason::Length &&
            e->finish_reason != FinishReason::Stop) {
          throw Error(ErrorKind::Internal, "an embedding request did not complete: " + e->error);
        }
      }
      embeddings.push_back(pool_embedding(hidden, d_model, req.mean, req.normalize));
    }
    send_json(res, embeddings_response(embeddings, req.base64, options_.model_id, prompt_tokens));
  } catch (...) {
    for (const auto& stream : streams) stream->cancel();
    throw;
  }
}

void HttpServer::handle_models(httplib::Response& res) const {
  json model = {{"id", options_.model_id},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "ember"},
                {"max_model_len", engine_.max_request_tokens()}};
  if (traces_ != nullptr) model["ember_trace"] = true;  // requests may ask for "trace": true
  send_json(res, json{{"object", "list"}, {"data", json::array({model})}});
}

void HttpServer::handle_metrics(httplib::Response& res) const {
  const ServingMetrics metrics = engine_.metrics();
  std::string text = metrics.render_prometheus() + render_vllm_metrics(metrics, options_.model_id);
  text += "# HELP ember_http_responses_total HTTP responses by status code\n";
  text += "# TYPE ember_http_responses_total counter\n";
  {
    std::lock_guard<std::mutex> lock(counts_mutex_);
    for (const auto& [status, n] : responses_by_status_) {
      text += "ember_http_responses_total{code=\"" + std::to_string(status) + "\"} " +
              std::to_string(n) + "\n";
    }
  }
  if (guarded_) {
    text += "# HELP ember_http_connections_open Client connections open\n";
    text += "# TYPE ember_http_connections_open gauge\n";
    text += "ember_http_connections_open " + std::to_string(guarded_->open_connections()) + "\n";
    text +=
        "# HELP ember_http_connections_refused_total Connections refused over --max-connections\n";
    text += "# TYPE ember_http_connections_refused_total counter\n";
    text += "ember_http_connections_refused_total " +
            std::to_string(guarded_->refused_connections()) + "\n";
    text +=
        "# HELP ember_http_connections_cut_total Connections closed past a header/body deadline "
        "or the header size limit\n";
    text += "# TYPE ember_http_connections_cut_total counter\n";
    text +=
        "ember_http_connections_cut_total " + std::to_string(guarded_->cut_connections()) + "\n";
  }
  text += "# HELP ember_http_requests_in_flight Generation requests being served\n";
  text += "# TYPE ember_http_requests_in_flight gauge\n";
  text += "ember_http_requests_in_flight " + std::to_string(active_.load()) + "\n";
  res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::handle_generate(Endpoint endpoint, const httplib::Request& http_req,
                                 httplib::Response& res) {
  auto active = std::make_shared<ActiveRequest>(this);
  try {
    if (draining_.load()) throw shutting_down("the server is shutting down");
    auto parsed = parse_request(endpoint, http_req.body, options_.strict_api);
    if (auto* e = std::get_if<Error>(&parsed)) throw *e;
    ApiRequest api = std::move(std::get<ApiRequest>(parsed));
    if (!api.ignored_fields.empty()) {
      std::string names;
      for (const std::string& f : api.ignored_fields)
        names += (names.empty() ? "'" : ", '") + f + "'";
      std::fprintf(
          stderr,
          "[ember] warning: ignored unknown request field(s) %s (--strict-api refuses them)\n",
          names.c_str());
    }
    api.tool_format = tool_format_;
    api.compiled_grammar = compile_grammar(api);
    std::vector<int32_t> prompt = tokenize_prompt(api);
    if (api.trace && traces_ == nullptr) {
      throw Error::invalid_request("trace", "'trace' needs a server started with --allow-trace");
    }
    std::shared_ptr<Relay> relay = submit(std::move(api), std::move(prompt));
    relay->active = std::move(active);
    if (!relay->trace_id.empty()) res.set_header("X-Ember-Trace-Id", relay->trace_id);
    if (relay->api.stream) {
      respond_stream(relay, res);
    } else {
      respond_whole(*relay, res);
    }
  } catch (const Error& e) {
    send_error(res, e);
  }
}

std::shared_ptr<const grammar::CompiledGrammar> HttpServer::compile_grammar(ApiRequest& api) {
  if (api.tools.choice == ToolChoice::Required || api.tools.choice == ToolChoice::Named) {
    if (!api.grammar.empty()) {
      throw Error::invalid_request(api.grammar_field, "'" + api.grammar_field +
                                                          "' cannot be combined with tool_choice "
                                                          "required or a named function");
    }
    api.grammar = tool_call_gbnf(api.tools, tool_format_);
    api.grammar_field = "tool_choice";
  }
  if (api.grammar.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(grammar_mutex_);
  for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
    if (it->first == api.grammar) {
      grammars_.splice(grammars_.begin(), grammars_, it);
      return it->second;
    }
  }
  grammar::Grammar parsed;
  try {
    parsed = grammar::parse_gbnf(api.grammar);
  } catch (const Error& e) {
    throw Error::invalid_request(api.grammar_field, e.what());
  }
  if (!token_trie_) token_trie_ = grammar::build_token_trie(tokenizer_);
  auto compiled = std::make_shared<const grammar::CompiledGrammar>(std::move(parsed), token_trie_);
  grammars_.emplace_front(api.grammar, compiled);
  if (grammars_.size() > 32) grammars_.pop_back();
  return compiled;
}

ChatPrompt HttpServer::render_chat(const ApiRequest& api) const {
  try {
    ChatTemplateContext context = chat_context_for(tokenizer_);
    context.tools = api.tools.tools;
    context.kwargs = api.chat_template_kwargs;
    return chat_template_.format(api.messages, context);
  } catch (const Error& e) {
    if (!e.field().empty()) throw;
    throw Error::invalid_request("messages", e.what());  // the template refused the conversation
  }
}

std::vector<int32_t> HttpServer::tokenize_prompt(const ApiRequest& api) const {
  // A prompt with more bytes than max_piece_bytes x context cannot fit whatever it tokenizes
  // to, so huge prompts are refused before spending time on them.
  const int64_t limit = engine_.max_request_tokens();
  const uint64_t byte_limit =
      static_cast<uint64_t>(max_piece_bytes_) * static_cast<uint64_t>(limit);
  const std::string context = "the context of " + std::to_string(limit) + " tokens";
  if (api.endpoint == Endpoint::ChatCompletions) {
    uint64_t bytes = 0;
    for (const ChatMessage& m : api.messages) bytes += m.content.size();
    if (bytes > byte_limit) throw too_long("messages", "the messages exceed " + context);
    return encode_chat_prompt(tokenizer_, render_chat(api));
  }
  if (api.prompt_is_ids) return api.prompt_ids;
  if (api.prompt_text.size() > byte_limit) {
    throw too_long("prompt", "the prompt exceeds " + context);
  }
  return tokenizer_.encode_with_special(api.prompt_text, tokenizer_.add_bos_default(), true);
}

std::shared_ptr<Relay> HttpServer::submit(ApiRequest api, std::vector<int32_t> prompt) {
  auto relay = std::make_shared<Relay>();
  GenerationRequest gen = api.generation;
  // SentencePiece: a completion of nothing but BOS prints without the leading space, as `ember
  // run` does.
  gen.strip_leading_space = api.endpoint == Endpoint::Completions && prompt.size() == 1 &&
                            prompt[0] == tokenizer_.bos_id() && tokenizer_.strip_space_after_bos();
  if (api.echo) {  // the prompt as the client sent it: without the BOS the tokenizer added
    api.echo_after_bos = !api.prompt_is_ids && !prompt.empty() &&
                         prompt[0] == tokenizer_.bos_id() && tokenizer_.add_bos_default();
    api.echo_tokens.assign(prompt.begin() + (api.echo_after_bos ? 1 : 0), prompt.end());
  }
  gen.prompt = std::move(prompt);
  gen.max_tokens = api.max_tokens.value_or(-1);  // the engine fits the default to the context
  const auto submit_choice = [&](int64_t index) {
    GenerationRequest g = gen;
    g.sampling.seed += static_cast<uint64_t>(index);
    if (api.compiled_grammar)
      g.constraint = std::make_shared<grammar::GrammarConstraint>(api.compiled_grammar);
    // Echo with logprobs: choice 0 computes the prompt's logprobs once for every choice.
    if (api.echo && index == 0) g.prompt_logprobs = gen.logprobs;
    if (api.trace && index == 0) start_trace(*relay, g);
    try {
      relay->choices.push_back(Choice{engine_.submit(std::move(g)), {}, std::nullopt, false});
    } catch (const Error& e) {
      relay->cancel();
      // The engine names the prompt "prompt"; a chat request's prompt is its messages.
      if (e.field() == "prompt" && api.endpoint == Endpoint::ChatCompletions) {
        throw Error::invalid_request("messages", e.what()).with_reason(e.reason());
      }
      throw;
    }
  };
  submit_choice(0);
  if (api.n > 1) {
    // The other choices start once choice 0 has its first token: its prompt's full blocks are in
    // the prefix cache by then, so they share them instead of prefilling the prompt n times.
    Choice& first = relay->choices[0];
    while (!first.held) first.held = first.stream->pop(1000ms);
    for (int64_t i = 1; i < api.n; ++i) submit_choice(i);
  }

  char id[48];
  std::snprintf(id, sizeof id, "%s-%llx%06llx",
                api.endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(created_),
                static_cast<unsigned long long>(next_id_.fetch_add(1)));
  relay->meta = ResponseMeta{id, static_cast<int64_t>(std::time(nullptr)), options_.model_id};
  relay->api = std::move(api);
  return relay;
}

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    if (port < 0) throw Error("cannot bind " + options_.host + " to any port");
  } else if (!http_->bind_to_port(options_.host, port)) {
    throw Error("cannot bind " + options_.host + ":" + std::to_string(port) +
                " (address in use or not available)");
  }
  guarded_->raise_backlog();
  return port;
}

void HttpServer::serve() {
  http_->listen_after_bind();
}

void HttpServer::shutdown() {
  draining_.store(true);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options_.drain_timeout_seconds));
  while (active_.load() > 0 && !force_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  // Whatever is still running is cancelled; its streams get a final event and close.
  engine_.shutdown(/*cancel_in_flight=*/true);
  auto grace = std::chrono::steady_clock::now() + 5s;
  while (active_.load() > 0 && std::chrono::steady_clock::now() < grace) {
    std::this_thread::sleep_for(20ms);
  }
  http_->stop();
}

}  // namespace ember::server
