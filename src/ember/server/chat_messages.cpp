#include "ember/server/chat_messages.h"

#include <set>
#include <string>

#include "ember/core/error.h"

namespace ember::server {

namespace {

using ojson = nlohmann::ordered_json;

// Message content: a string, null (an assistant turn with no text), or an array of content parts
// of which only {"type": "text", "text": ...} carry anything ember can use.
std::string message_content(const ojson& m, const std::string& param) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string text;
    for (const ojson& part : *it) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        throw Error::invalid_request(param + ".content", "only text content parts are supported");
      }
      text += part["text"].get<std::string>();
    }
    return text;
  }
  throw Error::invalid_request(param + ".content",
                               "'content' must be a string or an array of text parts");
}

// [{id, type: "function", function: {name, arguments: "<JSON>"}}] with arguments decoded.
ojson tool_calls(const ojson& calls, const std::string& param) {
  if (!calls.is_array()) throw Error::invalid_request(param, "'tool_calls' must be an array");
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const ojson& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      throw Error::invalid_request(p, "each tool call needs a 'function' object");
    }
    if (c.contains("type") && c["type"] != "function") {
      throw Error::invalid_request(p + ".type", "only 'function' tool calls are supported");
    }
    ojson call = c;
    ojson& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) {
      throw Error::invalid_request(p + ".function.name", "a tool call needs a string 'name'");
    }
    if (fn.contains("arguments") && fn["arguments"].is_string()) {
      const std::string& text = fn["arguments"].get_ref<const std::string&>();
      ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object()) {
        throw Error::invalid_request(p + ".function.arguments",
                                     "'arguments' must be a JSON object encoded as a string");
      }
      fn["arguments"] = std::move(parsed);
    }
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> parse_chat_messages(const ojson& body) {
  auto v = body.find("messages");
  if (v == body.end() || v->is_null())
    throw Error::invalid_request("messages", "'messages' is required");
  if (!v->is_array()) throw Error::invalid_request("messages", "'messages' must be an array");
  if (v->empty()) throw Error::invalid_request("messages", "'messages' must not be empty");
  static const std::set<std::string> known = {"role",       "content",      "name",
                                              "tool_calls", "tool_call_id", "refusal"};
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const ojson& m = (*v)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error::invalid_request(param, "each message must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      throw Error::invalid_request(param + ".role", "each message needs a string 'role'");
    }
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system turn
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      throw Error::invalid_request(param + ".role",
                                   "unknown role '" + role->get<std::string>() +
                                       "' (expected system, developer, user, assistant or tool)");
    }
    ChatMessage msg{r, message_content(m, param), nullptr};
    auto extra = std::make_shared<ojson>(ojson::object());
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.value().is_null() || it.key() == "role" || it.key() == "content") continue;
      if (known.count(it.key()) == 0) {
        throw Error::invalid_request(param + "." + it.key(),
                                     "message field '" + it.key() + "' is not supported");
      }
      if (it.key() == "refusal") continue;  // the model's own refusal text: nothing to render
      if (it.key() == "tool_calls") {
        if (r != "assistant") {
          throw Error::invalid_request(param + ".tool_calls",
                                       "only assistant messages have tool_calls");
        }
        (*extra)["tool_calls"] = tool_calls(it.value(), param + ".tool_calls");
      } else {
        if (!it.value().is_string()) {
          throw Error::invalid_request(param + "." + it.key(),
                                       "'" + it.key() + "' must be a string");
        }
        (*extra)[it.key()] = it.value();
      }
    }
    if (r == "tool" && !extra->contains("tool_call_id")) {
      throw Error::invalid_request(param + ".tool_call_id", "a tool message needs 'tool_call_id'");
    }
    if (!extra->empty()) msg.extra = std::move(extra);
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace ember::server
