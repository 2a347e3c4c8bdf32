// The `messages` of a chat request -> ChatMessages for the chat template. Content is a string,
// null, or text parts; roles are system (or developer), user, assistant and tool; tool_calls,
// tool_call_id and name travel to the template as HF passes them, with each tool call's
// function.arguments decoded from its JSON string into an object (HF templates apply tojson to
// it). The body is read as ordered JSON so that arguments keep the client's key order.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "ember/tokenizer/chat_template.h"

namespace ember::server {

// Throws ember::Error (InvalidArgument, naming the field, e.g. "messages[2].tool_calls") on a
// missing, empty or malformed list.
std::vector<ChatMessage> parse_chat_messages(const nlohmann::ordered_json& body);

}  // namespace ember::server
