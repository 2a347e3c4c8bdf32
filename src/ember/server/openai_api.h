// The OpenAI wire format, kept apart from HTTP plumbing so it can be tested without sockets:
// request JSON -> validated ApiRequest (or an ember::Error naming the field), and engine events ->
// response JSON / server-sent-event chunks for /v1/completions and /v1/chat/completions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ember/core/error.h"
#include "ember/engine/request.h"
#include "ember/server/tool_calls.h"
#include "ember/tokenizer/chat_template.h"

namespace ember {
class Tokenizer;
}

namespace ember::grammar {
class CompiledGrammar;
}

namespace ember::server {

enum class Endpoint : uint8_t { Completions, ChatCompletions };

// A request that passed validation. The prompt is not tokenized yet (the handler does that with
// the model's tokenizer and chat template).
struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  std::string prompt_text;          // completions, string prompt
  std::vector<int32_t> prompt_ids;  // completions, token-array prompt
  bool prompt_is_ids = false;
  // Completions echo: the response text (and logprobs) start with the prompt. echo_tokens: the
  // prompt's tokens without a BOS the tokenizer added (set by the server once it tokenized);
  // echo_after_bos: such a BOS came first, so the first echoed token has a logprob too.
  // ember extension: record the request's forward passes (ember trace) for GET /trace/{id}
  // (servers started with --allow-trace).
  bool trace = false;
  bool echo = false;
  std::vector<int32_t> echo_tokens;
  bool echo_after_bos = false;
  std::vector<ChatMessage> messages;  // chat
  // chat: chat_template_kwargs (vLLM's extension: extra template variables such as
  // enable_thinking) and tools; null when absent.
  std::shared_ptr<const nlohmann::ordered_json> chat_template_kwargs;
  ToolRequest tools;  // chat: tools, tool_choice, parallel_tool_calls
  ToolCallFormat tool_format = ToolCallFormat::Generic;  // set by the server from its template
  // Constrained decoding: a GBNF grammar the output must match ("" none), from `grammar`
  // (llama.cpp's field, GBNF as written) or response_format (json_object / json_schema), and the
  // request field it came from, for errors.
  std::string grammar;
  std::string grammar_field;
  std::vector<std::string> ignored_fields;  // fields no API knows (not --strict-api)
  std::shared_ptr<const grammar::CompiledGrammar> compiled_grammar;  // set by the server
  std::optional<int64_t> max_tokens;  // absent: the server picks min(256, what fits)
  int64_t n = 1;                      // choices; choice i samples with seed + i
  GenerationRequest generation;       // sampling, stop, penalties, logprobs, ignore_eos
  bool chat_logprobs = false;         // chat: logprobs: true
  int32_t top_logprobs = 0;           // chat: alternatives per token
};

// Parses and validates a request body. Wrong types, out-of-range values (n outside 1..16), empty
// messages and unknown roles give an InvalidArgument error naming the request field.
// A field that no API knows is ignored and listed in ApiRequest::ignored_fields, or refused when
// `strict` (--strict-api).
std::variant<ApiRequest, Error> parse_request(Endpoint endpoint, std::string_view body,
                                              bool strict = false);

// Everything a finished (or finishing) request produced, accumulated from its stream events.
struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<TokenLogprob> prompt_logprobs;  // echo: prompt tokens 1, 2, ... (choice 0 only)
  FinishReason finish_reason = FinishReason::None;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};

// Identity shared by every chunk of one response.
struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// "stop", "length", and for requests that did not end normally "abort" / "error".
const char* finish_reason_string(FinishReason reason);

nlohmann::json usage_json(const Completion& c);
// The usage of n choices of one prompt: the prompt counted once, the completions summed.
Completion total_usage(const std::vector<Completion>& choices);
// Non-streaming response bodies: choice i of `choices` has index i.
nlohmann::json completion_response(const ApiRequest& req, const ResponseMeta& meta,
                                   const std::vector<Completion>& choices,
                                   const Tokenizer& tokenizer);

// Streaming: each returns one SSE event, "data: {...}\n\n".
std::string sse_data(const nlohmann::json& chunk);
std::string sse_done();  // "data: [DONE]\n\n"
// The chat stream opens with a delta carrying only the role.
std::string chat_role_chunk(const ApiRequest& req, const ResponseMeta& meta, int64_t index = 0);
// A text increment (with its tokens' logprobs when asked for).
std::string delta_chunk(const ApiRequest& req, const ResponseMeta& meta, const std::string& text,
                        const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer,
                        int64_t text_offset, int64_t index = 0);
// Echo: the prompt as sent (a token-array prompt: its text, decoded).
std::string echo_text(const ApiRequest& req, const Tokenizer& tokenizer);
// Streamed echo: one chunk per choice before its first token, with the prompt's logprobs.
std::string echo_chunk(const ApiRequest& req, const ResponseMeta& meta,
                       const std::vector<TokenLogprob>& prompt_logprobs, const Tokenizer& tokenizer,
                       int64_t index = 0);
// The closing chunk: empty delta (chat) / empty text (completions) with finish_reason
// ("tool_calls" when the reply was parsed into calls).
std::string finish_chunk(const ApiRequest& req, const ResponseMeta& meta, FinishReason reason,
                         int64_t index = 0, bool tool_calls = false);
// Streamed tool calls: one chunk carrying every call of the reply (delta.tool_calls).
std::string tool_calls_chunk(const ApiRequest& req, const ResponseMeta& meta,
                             const std::vector<ToolCall>& calls, int64_t index = 0);
// The seed of choice `index`'s tool-call ids (distinct per response and choice).
uint64_t tool_call_id_seed(const ResponseMeta& meta, int64_t index);
// stream_options.include_usage: a last chunk with no choices and the usage.
std::string usage_chunk(const ApiRequest& req, const ResponseMeta& meta, const Completion& c);

// JSON dump that never throws on bytes that are not UTF-8 (they become U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace ember::server
