// Request side of the OpenAI API: a /v1/completions or /v1/chat/completions body -> a validated
// ApiRequest. Every field is handled or refused by name.
#include "ember/server/openai_api.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "ember/core/json_depth.h"
#include "ember/engine/grammar/json_schema_grammar.h"
#include "ember/server/chat_messages.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember::server {

using nlohmann::json;

namespace {

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;  // null means "not given" in OpenAI's API
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    throw Error::invalid_request(name, std::string("'") + name + "' must be a boolean");
  }
  return v->get<bool>();
}

std::optional<double> get_number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    throw Error::invalid_request(name, std::string("'") + name + "' must be a number");
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    throw Error::invalid_request(name, buf);
  }
  return d;
}

std::optional<int64_t> get_int(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  // 5.0 is accepted as 5 (some clients serialise every number as a double); 5.5 is not.
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  } else if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    return v->get<int64_t>();
  }
  throw Error::invalid_request(name, std::string("'") + name + "' must be an integer");
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  std::vector<std::string> stops;
  if (v == nullptr) return stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 16) throw Error::invalid_request("stop", "'stop' may hold at most 16 strings");
    for (const json& s : *v) {
      if (!s.is_string()) {
        throw Error::invalid_request("stop", "'stop' must be a string or an array of strings");
      }
      stops.push_back(s.get<std::string>());
    }
  } else {
    throw Error::invalid_request("stop", "'stop' must be a string or an array of strings");
  }
  std::erase_if(stops, [](const std::string& s) { return s.empty(); });
  return stops;
}

void get_prompt(const json& body, ApiRequest& req) {
  const json* v = field(body, "prompt");
  if (v == nullptr) throw Error::invalid_request("prompt", "'prompt' is required");
  auto ids_from = [&](const json& arr) {
    for (const json& t : arr) {
      if (!t.is_number_integer()) {
        throw Error::invalid_request("prompt", "a token-id prompt must hold integers");
      }
      int64_t id = t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        throw Error::invalid_request("prompt",
                                     "token id " + std::to_string(id) + " is out of range");
      }
      req.prompt_ids.push_back(static_cast<int32_t>(id));
    }
    req.prompt_is_ids = true;
  };
  if (v->is_string()) {
    req.prompt_text = v->get<std::string>();
  } else if (v->is_array() && !v->empty() && (*v)[0].is_number()) {
    ids_from(*v);
  } else if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) {
    req.prompt_text = (*v)[0].get<std::string>();
  } else if (v->is_array() && v->size() == 1 && (*v)[0].is_array()) {
    ids_from((*v)[0]);
  } else if (v->is_array() && v->size() > 1) {
    throw Error::invalid_request("prompt", "only one prompt per request is supported");
  } else {
    throw Error::invalid_request("prompt", "'prompt' must be a string or an array of token ids");
  }
  if (req.prompt_is_ids && req.prompt_ids.empty()) {
    throw Error::invalid_request("prompt", "'prompt' is empty");
  }
}

// max_completion_tokens is the newer name; either may be given.
// echo: 0 is allowed (the prompt's logprobs alone, as OpenAI's API allows).
std::optional<int64_t> get_max_tokens(const json& body, bool echo) {
  std::optional<int64_t> max_tokens = get_int(body, "max_completion_tokens");
  const char* max_param = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = get_int(body, "max_tokens");
    max_param = "max_tokens";
  }
  const int64_t least = echo ? 0 : 1;
  if (max_tokens && *max_tokens < least) {
    throw Error::invalid_request(max_param, std::string("'") + max_param + "' must be at least " +
                                                std::to_string(least) + ", got " +
                                                std::to_string(*max_tokens));
  }
  return max_tokens;
}

// {"token id": bias in [-100, 100], ...}, as OpenAI takes it; the ids are checked against the
// vocabulary when the request reaches the engine.
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& body) {
  std::vector<std::pair<int32_t, float>> out;
  const json* lb = field(body, "logit_bias");
  if (lb == nullptr) return out;
  if (!lb->is_object()) {
    throw Error::invalid_request("logit_bias",
                                 "'logit_bias' must be an object of token id -> bias");
  }
  if (lb->size() > 1024) {
    throw Error::invalid_request("logit_bias", "'logit_bias' may hold at most 1024 tokens");
  }
  for (const auto& [key, value] : lb->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      throw Error::invalid_request("logit_bias",
                                   "'logit_bias' key '" + key + "' is not a token id");
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      throw Error::invalid_request("logit_bias",
                                   "'logit_bias' values must be numbers between -100 and 100");
    }
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
}

SamplingParams get_sampling(const json& body) {
  SamplingParams p;
  // OpenAI's defaults: temperature 1, nucleus off; ember's extra knobs off unless asked for.
  p.temperature = static_cast<float>(get_number(body, "temperature", 0, 2).value_or(1.0));
  p.top_p = static_cast<float>(get_number(body, "top_p", 0, 1).value_or(1.0));
  p.min_p = static_cast<float>(get_number(body, "min_p", 0, 1).value_or(0.0));
  p.top_k = 0;
  if (auto k = get_int(body, "top_k")) {
    if (*k > std::numeric_limits<int32_t>::max()) {
      throw Error::invalid_request("top_k", "'top_k' is too large");
    }
    p.top_k = *k > 0 ? static_cast<int32_t>(*k) : 0;  // -1 / 0: off
  }
  p.repeat_penalty = 1.0f;
  if (auto r = get_number(body, "repetition_penalty", 0.01, 10)) {
    p.repeat_penalty = static_cast<float>(*r);
  }
  if (auto seed = get_int(body, "seed")) {
    p.seed = static_cast<uint64_t>(*seed);
  } else {
    p.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  p.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", -2, 2).value_or(0));
  p.frequency_penalty =
      static_cast<float>(get_number(body, "frequency_penalty", -2, 2).value_or(0));
  p.logit_bias = get_logit_bias(body);
  return p;
}

// Completions: logprobs N; chat: logprobs true (+ top_logprobs N).
void get_logprobs(Endpoint endpoint, const json& body, ApiRequest& req) {
  GenerationRequest& g = req.generation;
  if (endpoint == Endpoint::Completions) {
    if (const json* lp = field(body, "logprobs"); lp != nullptr && lp->is_boolean()) {
      throw Error::invalid_request("logprobs", "'logprobs' must be an integer for completions");
    }
    if (auto lp = get_int(body, "logprobs")) {
      if (*lp < 0 || *lp > 20) {
        throw Error::invalid_request("logprobs", "'logprobs' must be between 0 and 20");
      }
      g.logprobs = static_cast<int32_t>(*lp);
    }
  } else {
    req.chat_logprobs = get_bool(body, "logprobs", false);
    if (auto top = get_int(body, "top_logprobs")) {
      if (*top < 0 || *top > 20) {
        throw Error::invalid_request("top_logprobs", "'top_logprobs' must be between 0 and 20");
      }
      if (!req.chat_logprobs) {
        throw Error::invalid_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      }
      req.top_logprobs = static_cast<int32_t>(*top);
    }
    if (req.chat_logprobs) g.logprobs = req.top_logprobs;
  }
}

// response_format (chat: text, json_object, json_schema) and grammar (GBNF) -> req.grammar.
void get_constraint(Endpoint endpoint, const json& body, const nlohmann::ordered_json* ordered,
                    ApiRequest& req) {
  if (const json* g = field(body, "grammar")) {
    if (!g->is_string() || g->get<std::string>().empty()) {
      throw Error::invalid_request("grammar", "'grammar' must be a GBNF grammar (a string)");
    }
    req.grammar = g->get<std::string>();
    req.grammar_field = "grammar";
  }
  const json* rf = endpoint == Endpoint::ChatCompletions ? field(body, "response_format") : nullptr;
  if (rf == nullptr) return;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
    throw Error::invalid_request("response_format", "'response_format' must be {\"type\": ...}");
  }
  const std::string type = (*rf)["type"];
  if (type == "text") return;
  if (!req.grammar.empty()) {
    throw Error::invalid_request("response_format",
                                 "give 'grammar' or 'response_format', not both");
  }
  req.grammar_field = "response_format";
  if (type == "json_object") {
    req.grammar = grammar::json_object_gbnf();
  } else if (type == "json_schema") {
    const auto& spec = (*ordered)["response_format"];
    if (!spec.contains("json_schema") || !spec["json_schema"].is_object() ||
        !spec["json_schema"].contains("schema")) {
      throw Error::invalid_request("response_format",
                                   "json_schema needs {\"json_schema\": {\"name\", \"schema\"}}");
    }
    try {
      req.grammar = grammar::json_schema_to_gbnf(spec["json_schema"]["schema"]);
    } catch (const Error& e) {
      throw Error::invalid_request("response_format", e.what());
    }
  } else {
    throw Error::invalid_request(
        "response_format",
        "response_format type '" + type + "' is not one of text, json_object, json_schema");
  }
}

// Every field of a request is either handled or refused by name: an app must be able to tell that
// ember did not do what it asked (tools, response_format, logit_bias... were silently ignored).
// `user` (an end-user id for the provider's abuse monitoring) changes nothing and is accepted; a
// null value asks for nothing and is accepted for any name.
void refuse_unhandled_fields(Endpoint endpoint, const json& body, bool strict, ApiRequest& req) {
  static const std::set<std::string> common = {
      "model", "n", "stream", "stream_options", "max_tokens", "max_completion_tokens",
      "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "presence_penalty",
      "frequency_penalty", "stop", "ignore_eos", "logprobs", "logit_bias", "min_tokens",
      "speculative", "trace", "user",
      // harmless to ignore: they change no output
      "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"};
  static const std::set<std::string> completions = {"prompt", "echo", "best_of", "grammar"};
  static const std::set<std::string> chat = {
      "messages",    "top_logprobs",        "chat_template_kwargs", "tools",
      "tool_choice", "parallel_tool_calls", "response_format",      "grammar"};
  // Fields of OpenAI's API that would change the output and that ember does not implement.
  static const std::set<std::string> not_yet = {
      "functions",        "function_call",      "suffix",   "modalities", "audio", "prediction",
      "reasoning_effort", "web_search_options", "verbosity"};
  const std::set<std::string>& own = endpoint == Endpoint::Completions ? completions : chat;
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || common.count(key) != 0 || own.count(key) != 0) continue;
    if (not_yet.count(key) != 0) {
      throw Error::invalid_request(key, "'" + key + "' is not supported by ember yet");
    }
    if (!strict) {  // as vLLM does: a field no API knows is ignored (the server logs it)
      req.ignored_fields.push_back(key);
      continue;
    }
    throw Error::invalid_request(
        key, "unknown field '" + key + "' for " +
                 (endpoint == Endpoint::Completions ? "/v1/completions" : "/v1/chat/completions") +
                 " (--strict-api)");
  }
}

ApiRequest parse_object(Endpoint endpoint, const json& body, const nlohmann::ordered_json* ordered,
                        bool strict) {
  ApiRequest req;
  req.endpoint = endpoint;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw Error::invalid_request("model", "'model' must be a string");
    req.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::Completions) {
    get_prompt(body, req);
    req.echo = get_bool(body, "echo", false);
    if (auto best_of = get_int(body, "best_of"); best_of && *best_of != 1) {
      throw Error::invalid_request("best_of", "'best_of' must be 1");
    }
  } else {
    req.messages = parse_chat_messages(*ordered);
    req.tools = parse_tool_request(*ordered);
    if (const json* kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object()) {
        throw Error::invalid_request("chat_template_kwargs",
                                     "'chat_template_kwargs' must be an object");
      }
      req.chat_template_kwargs =
          std::make_shared<const nlohmann::ordered_json>(ordered->at("chat_template_kwargs"));
    }
  }
  if (auto n = get_int(body, "n")) {
    if (*n < 1 || *n > 16) throw Error::invalid_request("n", "'n' must be between 1 and 16");
    req.n = *n;
  }
  req.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) {
      throw Error::invalid_request("stream_options", "'stream_options' must be an object");
    }
    req.include_usage = get_bool(*so, "include_usage", false);
  }

  req.max_tokens = get_max_tokens(body, req.echo);
  GenerationRequest& g = req.generation;
  g.sampling = get_sampling(body);
  g.stop = get_stop(body);
  g.ignore_eos = get_bool(body, "ignore_eos", false);
  g.speculative = get_bool(body, "speculative", true);  // ember extension: opt out per request
  req.trace = get_bool(body, "trace", false);           // ember extension: GET /trace/{id}
  if (req.trace && req.n > 1) {
    throw Error::invalid_request("trace", "'trace' records one choice: use n = 1");
  }
  if (auto m = get_int(body, "min_tokens")) {
    if (*m < 0) throw Error::invalid_request("min_tokens", "'min_tokens' must be >= 0");
    g.min_tokens = *m;
  }

  get_logprobs(endpoint, body, req);
  get_constraint(endpoint, body, ordered, req);
  // Last: a missing or malformed field the endpoint needs is the first thing to report.
  refuse_unhandled_fields(endpoint, body, strict, req);
  return req;
}

}  // namespace

std::variant<ApiRequest, Error> parse_request(Endpoint endpoint, std::string_view body,
                                              bool strict) {
  try {
    check_json_depth(body, "", /*is_file=*/false);
  } catch (const Error& e) {
    return e;
  }
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::invalid_request("", "the request body is not valid JSON");
  if (!j.is_object()) return Error::invalid_request("", "the request body must be a JSON object");
  try {
    // Chat messages are read in the client's key order (tool-call arguments render with tojson).
    nlohmann::ordered_json ordered;
    if (endpoint == Endpoint::ChatCompletions)
      ordered = nlohmann::ordered_json::parse(body.begin(), body.end());
    return parse_object(endpoint, j, &ordered, strict);
  } catch (const Error& e) {
    return e;
  } catch (const json::exception& e) {
    return Error::invalid_request("", std::string("malformed request: ") + e.what());
  }
}

}  // namespace ember::server
