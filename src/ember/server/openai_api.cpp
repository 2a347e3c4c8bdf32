// Response side of the OpenAI API: the JSON bodies and server-sent events of completions and chat
// completions (choices, logprobs, echo, tool calls, usage).
#include "ember/server/openai_api.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "ember/server/chat_messages.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember::server {

using nlohmann::json;

namespace {
json bytes_array(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Chat format: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal"}.
json chat_logprobs_json(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    std::string t = tok.token_bytes(lp.token);
    json top = json::array();
    for (const auto& [id, l] : lp.top) {
      std::string a = tok.token_bytes(id);
      top.push_back({{"token", a}, {"logprob", l}, {"bytes", bytes_array(a)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_array(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

// One token of the legacy logprobs arrays; lp null: no logprob (echo's first prompt token).
struct LogprobEntry {
  int32_t token;
  const TokenLogprob* lp;
};

// Legacy completions format: parallel arrays, top alternatives as {text: logprob} maps (null
// where the entry has no logprob, as OpenAI writes it).
json completion_logprobs_json(const std::vector<LogprobEntry>& entries, const Tokenizer& tok,
                              int64_t text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const LogprobEntry& e : entries) {
    std::string t = tok.token_bytes(e.token);
    tokens.push_back(t);
    if (e.lp == nullptr) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
    } else {
      token_logprobs.push_back(e.lp->logprob);
      json alternatives = json::object();
      for (const auto& [id, l] : e.lp->top) alternatives[tok.token_bytes(id)] = l;
      top.push_back(alternatives);
    }
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(t.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json completion_logprobs_json(const std::vector<TokenLogprob>& lps, const Tokenizer& tok,
                              int64_t text_offset) {
  std::vector<LogprobEntry> entries;
  for (const TokenLogprob& lp : lps) entries.push_back({lp.token, &lp});
  return completion_logprobs_json(entries, tok, text_offset);
}

// Echo: the prompt's tokens first (the first one without a logprob unless a BOS preceded it),
// then the generated ones.
json echo_logprobs_json(const ApiRequest& req, const std::vector<TokenLogprob>& prompt_lps,
                        const std::vector<TokenLogprob>& generated, const Tokenizer& tok) {
  std::vector<LogprobEntry> entries;
  const size_t first = req.echo_after_bos ? 1 : 0;  // prompt position of echo_tokens[0]
  for (size_t k = 0; k < req.echo_tokens.size(); ++k) {
    const size_t position = first + k;  // prompt_lps[p - 1] is prompt token p's
    const bool known = position > 0 && position - 1 < prompt_lps.size();
    entries.push_back({req.echo_tokens[k], known ? &prompt_lps[position - 1] : nullptr});
  }
  for (const TokenLogprob& lp : generated) entries.push_back({lp.token, &lp});
  return completion_logprobs_json(entries, tok, 0);
}

json chunk_base(const ApiRequest& req, const ResponseMeta& meta) {
  bool chat = req.endpoint == Endpoint::ChatCompletions;
  json j = {{"id", meta.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model}};
  if (chat) j["system_fingerprint"] = "fp_ember";
  // With include_usage every chunk carries "usage": null until the last one (OpenAI's shape).
  if (req.include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* finish_reason_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "abort";
    case FinishReason::Error:
      return "error";
    case FinishReason::None:
      return "stop";
  }
  return "stop";
}

json usage_json(const Completion& c) {
  return {{"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", c.cached_prompt_tokens}}}};
}

Completion total_usage(const std::vector<Completion>& choices) {
  Completion total;
  if (choices.empty()) return total;
  total.prompt_tokens = choices[0].prompt_tokens;
  total.cached_prompt_tokens = choices[0].cached_prompt_tokens;
  for (const Completion& c : choices) total.completion_tokens += c.completion_tokens;
  return total;
}

json completion_response(const ApiRequest& req, const ResponseMeta& meta,
                         const std::vector<Completion>& choices, const Tokenizer& tokenizer) {
  bool chat = req.endpoint == Endpoint::ChatCompletions;
  bool want_logprobs = req.generation.logprobs >= 0;
  json array = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Completion& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", finish_reason_string(c.finish_reason)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
      if (req.tools.active()) {
        ParsedReply reply = parse_tool_calls(req.tool_format, c.text, *req.tools.tools,
                                             tool_call_id_seed(meta, static_cast<int64_t>(i)));
        if (!reply.calls.empty()) {
          if (!req.tools.parallel) reply.calls.resize(1);
          choice["message"]["content"] =
              reply.content.empty() ? json(nullptr) : json(reply.content);
          choice["message"]["tool_calls"] = tool_calls_json(reply.calls, false);
          // A reply cut by max_tokens stays "length" (its last call may be missing).
          if (c.finish_reason == FinishReason::Stop) choice["finish_reason"] = "tool_calls";
        }
      }
      choice["logprobs"] =
          want_logprobs ? chat_logprobs_json(c.logprobs, tokenizer) : json(nullptr);
    } else if (req.echo) {
      choice["text"] = echo_text(req, tokenizer) + c.text;
      choice["logprobs"] =
          want_logprobs ? echo_logprobs_json(req, choices[0].prompt_logprobs, c.logprobs, tokenizer)
                        : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          want_logprobs ? completion_logprobs_json(c.logprobs, tokenizer, 0) : json(nullptr);
    }
    array.push_back(std::move(choice));
  }
  json j = {{"id", meta.id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", std::move(array)},
            {"usage", usage_json(total_usage(choices))}};
  if (chat) j["system_fingerprint"] = "fp_ember";
  return j;
}

std::string sse_data(const json& chunk) {
  return "data: " + dump_json(chunk) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string chat_role_chunk(const ApiRequest& req, const ResponseMeta& meta, int64_t index) {
  json j = chunk_base(req, meta);
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return sse_data(j);
}

std::string delta_chunk(const ApiRequest& req, const ResponseMeta& meta, const std::string& text,
                        const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer,
                        int64_t text_offset, int64_t index) {
  json j = chunk_base(req, meta);
  bool want_logprobs = req.generation.logprobs >= 0 && !logprobs.empty();
  json choice = {{"index", index}, {"finish_reason", nullptr}};
  if (req.endpoint == Endpoint::ChatCompletions) {
    choice["delta"] = {{"content", text}};
    choice["logprobs"] = want_logprobs ? chat_logprobs_json(logprobs, tokenizer) : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] =
        want_logprobs ? completion_logprobs_json(logprobs, tokenizer, text_offset) : json(nullptr);
  }
  j["choices"] = json::array({choice});
  return sse_data(j);
}

std::string echo_text(const ApiRequest& req, const Tokenizer& tokenizer) {
  return req.prompt_is_ids ? tokenizer.decode(req.echo_tokens) : req.prompt_text;
}

std::string echo_chunk(const ApiRequest& req, const ResponseMeta& meta,
                       const std::vector<TokenLogprob>& prompt_logprobs, const Tokenizer& tokenizer,
                       int64_t index) {
  json j = chunk_base(req, meta);
  json choice = {{"index", index}, {"text", echo_text(req, tokenizer)}, {"finish_reason", nullptr}};
  choice["logprobs"] = req.generation.logprobs >= 0
                           ? echo_logprobs_json(req, prompt_logprobs, {}, tokenizer)
                           : json(nullptr);
  j["choices"] = json::array({choice});
  return sse_data(j);
}

std::string finish_chunk(const ApiRequest& req, const ResponseMeta& meta, FinishReason reason,
                         int64_t index, bool tool_calls) {
  json j = chunk_base(req, meta);
  json choice = {{"index", index},
                 {"logprobs", nullptr},
                 {"finish_reason", tool_calls ? "tool_calls" : finish_reason_string(reason)}};
  if (req.endpoint == Endpoint::ChatCompletions) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  j["choices"] = json::array({choice});
  return sse_data(j);
}

std::string tool_calls_chunk(const ApiRequest& req, const ResponseMeta& meta,
                             const std::vector<ToolCall>& calls, int64_t index) {
  json j = chunk_base(req, meta);
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"tool_calls", tool_calls_json(calls, true)}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return sse_data(j);
}

uint64_t tool_call_id_seed(const ResponseMeta& meta, int64_t index) {
  return std::hash<std::string>{}(meta.id) ^ (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull);
}

std::string usage_chunk(const ApiRequest& req, const ResponseMeta& meta, const Completion& c) {
  json j = chunk_base(req, meta);
  j["choices"] = json::array();
  j["usage"] = usage_json(c);
  return sse_data(j);
}

}  // namespace ember::server
