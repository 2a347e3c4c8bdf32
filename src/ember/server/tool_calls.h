// OpenAI function calling: the request's `tools` / `tool_choice` / `parallel_tool_calls`, and the
// model's output parsed back into `tool_calls`. How a model writes a call depends on its family;
// the format is recognised from the chat template:
//   Hermes / Qwen   <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (repeated)
//   Llama 3.x       [<|python_tag|>]{"name": ..., "parameters": {...}}  (';'-separated)
//   Mistral         [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or
//                   [TOOL_CALLS]name[ARGS]{...}  (tekken v11+)
//   Functionary 3.1 <function=name>{...}</function>
//   generic         the whole reply is {"name", "arguments"|"parameters"} or a list of them
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ember::server {

enum class ToolCallFormat : uint8_t { Hermes, Llama3, Mistral, FunctionaryV31, Generic };

// The format a chat template's model writes calls in (Generic when nothing is recognised).
ToolCallFormat tool_call_format_for_template(const std::string& template_source);
const char* tool_call_format_name(ToolCallFormat format);

enum class ToolChoice : uint8_t { None, Auto, Required, Named };

struct ToolRequest {
  std::shared_ptr<const nlohmann::ordered_json> tools;  // validated OpenAI tools array
  ToolChoice choice = ToolChoice::Auto;
  std::string function;  // ToolChoice::Named
  bool parallel = true;  // parallel_tool_calls
  bool active() const { return tools && choice != ToolChoice::None; }
};

// Reads tools / tool_choice / parallel_tool_calls from a chat request body; throws ember::Error
// (InvalidArgument, naming the field) on a malformed one or a named function not in `tools`.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body);

struct ToolCall {
  std::string id;  // "call_..." (Mistral: 9 alphanumerics, which its template requires)
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedReply {
  std::string content;  // text outside the calls (trimmed); empty when there is none
  std::vector<ToolCall> calls;
};

// Splits a finished reply into content and tool calls. Calls whose JSON does not parse, or that
// name a function not in `tools`, are left in the content (the model did not make a valid call).
ParsedReply parse_tool_calls(ToolCallFormat format, const std::string& text,
                             const nlohmann::ordered_json& tools, uint64_t id_seed);

// tool_choice required / a named function: a GBNF grammar that makes the reply one call (or,
// with parallel_tool_calls, several) in the model's format, each naming a function of `tools`
// (or the named one) with arguments valid against its parameters schema. Throws ember::Error
// (naming "tools") for a parameters schema the grammar cannot enforce.
std::string tool_call_gbnf(const ToolRequest& request, ToolCallFormat format);

// OpenAI's shapes: message.tool_calls ([{id, type, function: {name, arguments}}]) and, streamed,
// delta.tool_calls (the same with each call's index).
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// Streaming: how much of the text so far may be sent as content now. Text that could begin a
// call (a prefix of the format's marker, or a reply that opens with '{' / '[' in the formats
// without one) is held back until the reply ends and parse_tool_calls() decides.
size_t streamable_prefix(ToolCallFormat format, const std::string& text);

}  // namespace ember::server
