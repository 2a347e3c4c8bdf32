#include "ember/server/tool_calls.h"

#include <algorithm>

#include "ember/core/error.h"
#include "ember/engine/grammar/json_schema_grammar.h"

namespace ember::server {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kWhitespace = " \t\r\n";

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(kWhitespace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kWhitespace) - b + 1);
}

// The end (one past) of the JSON object or array that starts at text[start], by balancing
// brackets outside strings; npos when it does not close.
size_t json_value_end(std::string_view text, size_t start) {
  if (start >= text.size() || (text[start] != '{' && text[start] != '['))
    return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string make_id(ToolCallFormat format, uint64_t& state) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const bool mistral = format == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[next() % 62];
  return id;
}

bool known_function(const ojson& tools, const std::string& name) {
  for (const ojson& t : tools) {
    if (t["function"]["name"] == name) return true;
  }
  return false;
}

// {"name": ..., "arguments" | "parameters": {...} or "<json>"} -> a call, or nullopt.
std::optional<ToolCall> call_from_json(const ojson& j, const ojson& tools) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall call;
  call.name = j["name"];
  if (!known_function(tools, call.name)) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  ojson args = j.contains(key) ? j[key] : ojson::object();
  if (args.is_string()) args = ojson::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return std::nullopt;
  call.arguments = args.dump();
  return call;
}

// Every JSON value in `text` between `open` and `close` markers (close may be missing at the
// end); the rest is content.
bool parse_tagged(std::string_view text, std::string_view open, std::string_view close,
                  const ojson& tools, ParsedReply& out, bool name_in_tag) {
  std::string content;
  size_t pos = 0;
  while (true) {
    size_t start = text.find(open, pos);
    if (start == std::string_view::npos) break;
    content += text.substr(pos, start - pos);
    size_t body = start + open.size();
    size_t end = text.find(close, body);
    std::string_view inner =
        text.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body);
    std::optional<ToolCall> call;
    if (name_in_tag) {  // <function=NAME>{args}
      size_t gt = inner.find('>');
      if (gt == std::string_view::npos) return false;
      ojson j = {{"name", std::string(inner.substr(0, gt))},
                 {"arguments", ojson::parse(trim(inner.substr(gt + 1)), nullptr, false)}};
      if (j["arguments"].is_discarded()) return false;
      call = call_from_json(j, tools);
    } else {
      call = call_from_json(ojson::parse(trim(inner), nullptr, false), tools);
    }
    if (end == std::string_view::npos) {  // the reply ended inside this call
      if (call) {
        out.calls.push_back(std::move(*call));
      } else if (out.calls.empty()) {
        return false;
      }  // else: a last call cut short by max_tokens, dropped
      pos = text.size();
      break;
    }
    if (!call) return false;
    out.calls.push_back(std::move(*call));
    pos = end + close.size();
  }
  content += text.substr(std::min(pos, text.size()));
  out.content = std::string(trim(content));
  return !out.calls.empty();
}

// One or more JSON call objects, separated by ';' / whitespace, or one array of them.
bool parse_json_calls(std::string_view text, const ojson& tools, ParsedReply& out) {
  text = trim(text);
  if (text.substr(0, 7) == "```json" && text.size() > 10 && text.substr(text.size() - 3) == "```") {
    text = trim(text.substr(7, text.size() - 10));
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = json_value_end(text, pos);
    if (end == std::string_view::npos) return false;
    ojson j = ojson::parse(text.substr(pos, end - pos), nullptr, false);
    for (const ojson& item : j.is_array() ? j : ojson::array({j})) {
      std::optional<ToolCall> call = call_from_json(item, tools);
      if (!call) return false;
      out.calls.push_back(std::move(*call));
    }
    pos = end;
    while (pos < text.size() &&
           (text[pos] == ';' || kWhitespace.find(text[pos]) != std::string_view::npos))
      ++pos;
  }
  return !out.calls.empty();
}

// [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[ARGS]{...} (repeated).
bool parse_mistral(std::string_view text, const ojson& tools, ParsedReply& out) {
  constexpr std::string_view kMarker = "[TOOL_CALLS]";
  size_t start = text.find(kMarker);
  if (start == std::string_view::npos) return false;
  out.content = std::string(trim(text.substr(0, start)));
  std::string_view rest = trim(text.substr(start + kMarker.size()));
  if (!rest.empty() && rest[0] == '[') return parse_json_calls(rest, tools, out);
  while (!rest.empty()) {
    size_t args = rest.find("[ARGS]");
    if (args == std::string_view::npos) return false;
    std::string name(trim(rest.substr(0, args)));
    size_t body = args + 6;
    size_t end = json_value_end(rest, body);
    if (end == std::string_view::npos) return false;
    ojson j = {{"name", name},
               {"arguments", ojson::parse(rest.substr(body, end - body), nullptr, false)}};
    std::optional<ToolCall> call = call_from_json(j, tools);
    if (!call) return false;
    out.calls.push_back(std::move(*call));
    rest = trim(rest.substr(end));
    if (rest.substr(0, kMarker.size()) == kMarker) rest = trim(rest.substr(kMarker.size()));
  }
  return !out.calls.empty();
}

const ojson& function_of(const ojson& tool, const std::string& param) {
  if (!tool.is_object() || tool.value("type", "function") != "function" ||
      !tool.contains("function") || !tool["function"].is_object()) {
    throw Error::invalid_request(param,
                                 "each tool must be {\"type\": \"function\", \"function\": {...}}");
  }
  const ojson& fn = tool["function"];
  if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
    throw Error::invalid_request(param + ".function.name",
                                 "a function needs a non-empty string 'name'");
  }
  if (fn.contains("parameters") && !fn["parameters"].is_object()) {
    throw Error::invalid_request(param + ".function.parameters",
                                 "'parameters' must be a JSON schema object");
  }
  return fn;
}

}  // namespace

ToolCallFormat tool_call_format_for_template(const std::string& source) {
  if (source.find("<tool_call>") != std::string::npos) return ToolCallFormat::Hermes;
  if (source.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::Mistral;
  if (source.find("<function=") != std::string::npos) return ToolCallFormat::FunctionaryV31;
  if (source.find("<|python_tag|>") != std::string::npos ||
      source.find("ipython") != std::string::npos) {
    return ToolCallFormat::Llama3;
  }
  return ToolCallFormat::Generic;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3:
      return "llama3";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::FunctionaryV31:
      return "functionary-v3.1";
    case ToolCallFormat::Generic:
      return "generic";
  }
  return "generic";
}

ToolRequest parse_tool_request(const ojson& body) {
  ToolRequest r;
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw Error::invalid_request("tools", "'tools' must be an array");
    if (tools->size() > 128) throw Error::invalid_request("tools", "at most 128 tools");
    for (size_t i = 0; i < tools->size(); ++i)
      function_of((*tools)[i], "tools[" + std::to_string(i) + "]");
    if (!tools->empty()) r.tools = std::make_shared<const ojson>(*tools);
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = *choice;
      if (c == "none")
        r.choice = ToolChoice::None;
      else if (c == "auto")
        r.choice = ToolChoice::Auto;
      else if (c == "required")
        r.choice = ToolChoice::Required;
      else
        throw Error::invalid_request(
            "tool_choice",
            "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    } else if (choice->is_object() && choice->contains("function") &&
               (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      r.choice = ToolChoice::Named;
      r.function = (*choice)["function"]["name"];
    } else {
      throw Error::invalid_request("tool_choice",
                                   "'tool_choice' must be none, auto, required or {\"type\": "
                                   "\"function\", \"function\": {\"name\": ...}}");
    }
    if (r.choice != ToolChoice::None && !r.tools) {
      throw Error::invalid_request("tool_choice", "'tool_choice' needs 'tools'");
    }
    if (r.choice == ToolChoice::Named && !known_function(*r.tools, r.function)) {
      throw Error::invalid_request("tool_choice", "no tool named '" + r.function + "' in 'tools'");
    }
  }
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) {
      throw Error::invalid_request("parallel_tool_calls",
                                   "'parallel_tool_calls' must be a boolean");
    }
    r.parallel = *parallel;
  }
  return r;
}

ParsedReply parse_tool_calls(ToolCallFormat format, const std::string& text, const ojson& tools,
                             uint64_t id_seed) {
  ParsedReply out;
  bool ok = false;
  switch (format) {
    case ToolCallFormat::Hermes:
      ok = parse_tagged(text, "<tool_call>", "</tool_call>", tools, out, false);
      break;
    case ToolCallFormat::FunctionaryV31:
      ok = parse_tagged(text, "<function=", "</function>", tools, out, true);
      break;
    case ToolCallFormat::Mistral:
      ok = parse_mistral(text, tools, out);
      break;
    case ToolCallFormat::Llama3: {
      std::string_view t = trim(text);
      if (t.substr(0, 14) == "<|python_tag|>") t = t.substr(14);
      ok = parse_json_calls(t, tools, out);
      break;
    }
    case ToolCallFormat::Generic:
      ok = parse_json_calls(text, tools, out);
      break;
  }
  if (!ok) return ParsedReply{text, {}};
  for (ToolCall& c : out.calls) c.id = make_id(format, id_seed);
  return out;
}

std::string tool_call_gbnf(const ToolRequest& request, ToolCallFormat format) {
  using grammar::JsonSchemaGrammar;
  JsonSchemaGrammar g;
  std::string calls;  // one alternative per allowed function
  const ojson any_object = {{"type", "object"}};
  for (size_t i = 0; i < request.tools->size(); ++i) {
    const ojson& fn = (*request.tools)[i]["function"];
    const std::string name = fn["name"];
    if (request.choice == ToolChoice::Named && name != request.function) continue;
    const ojson& params = fn.contains("parameters") ? fn["parameters"] : any_object;
    std::string args;
    try {
      args = g.add_schema(params, params, "args-" + std::to_string(i));
    } catch (const Error& e) {
      throw Error::invalid_request("tools[" + std::to_string(i) + "].function.parameters",
                                   e.what());
    }
    const std::string quoted = JsonSchemaGrammar::literal(ojson(name).dump());
    std::string call;
    switch (format) {
      case ToolCallFormat::FunctionaryV31:
        call = JsonSchemaGrammar::literal("<function=" + name + ">") + " " + args + " " +
               JsonSchemaGrammar::literal("</function>");
        break;
      case ToolCallFormat::Llama3:
        call = R"("{\"name\": " )" + quoted + R"( ", \"parameters\": " )" + args + R"( "}")";
        break;
      default:
        call = R"("{\"name\": " )" + quoted + R"( ", \"arguments\": " )" + args + R"( "}")";
    }
    calls += (calls.empty() ? "" : " | ") + std::string("(") + call + ")";
  }
  g.add_rule("tool-call", calls);
  std::string one;
  std::string sep;
  switch (format) {
    case ToolCallFormat::Hermes:
      one = R"("<tool_call>\n" tool-call "\n</tool_call>")";
      sep = R"("\n")";
      break;
    case ToolCallFormat::Mistral:
      g.add_rule("tool-calls", R"("[TOOL_CALLS][" tool-call )" +
                                   std::string(request.parallel ? R"((", " tool-call)*)" : "") +
                                   R"( "]")");
      return g.gbnf("tool-calls");
    case ToolCallFormat::Llama3:
      one = "tool-call";
      sep = R"("; ")";
      break;
    default:
      one = "tool-call";
      sep = R"("\n")";
  }
  g.add_rule("tool-calls", one + (request.parallel ? " (" + sep + " " + one + ")*" : ""));
  return g.gbnf("tool-calls");
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::json c = {{"id", calls[i].id},
                        {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

size_t streamable_prefix(ToolCallFormat format, const std::string& text) {
  std::string_view marker;
  switch (format) {
    case ToolCallFormat::Hermes:
      marker = "<tool_call>";
      break;
    case ToolCallFormat::Mistral:
      marker = "[TOOL_CALLS]";
      break;
    case ToolCallFormat::FunctionaryV31:
      marker = "<function=";
      break;
    case ToolCallFormat::Llama3:
    case ToolCallFormat::Generic: {
      // A call is the whole reply: hold while it is blank or opens like one.
      std::string_view t = trim(text);
      if (t.empty() || t[0] == '{' || t[0] == '[' || t[0] == '`' ||
          std::string_view("<|python_tag|>").substr(0, t.size()) == t.substr(0, 14)) {
        return 0;
      }
      return text.size();
    }
  }
  size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  // Hold back a tail that could be the start of the marker.
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (text.compare(text.size() - k, k, marker.substr(0, k)) == 0) return text.size() - k;
  }
  return text.size();
}

}  // namespace ember::server
