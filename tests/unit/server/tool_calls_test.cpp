// Tool calls: the request fields, each family's output format parsed back into calls, what a
// stream may send before the reply ends, and the OpenAI response shapes.
#include "ember/server/tool_calls.h"

#include <gtest/gtest.h>

#include "ember/core/error.h"
#include "ember/server/openai_api.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "test_util.h"

namespace ember::server {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
  {"type": "function", "function": {"name": "get_time"}}])");

ParsedReply parse(ToolCallFormat f, const std::string& text) {
  return parse_tool_calls(f, text, kTools, 7);
}

TEST(ToolCalls, FormatFollowsTheTemplate) {
  EXPECT_EQ(tool_call_format_for_template("{{ '<tool_call>' }}"), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_call_format_for_template("[TOOL_CALLS]"), ToolCallFormat::Mistral);
  EXPECT_EQ(tool_call_format_for_template("<|python_tag|>"), ToolCallFormat::Llama3);
  EXPECT_EQ(tool_call_format_for_template("<function="), ToolCallFormat::FunctionaryV31);
  EXPECT_EQ(tool_call_format_for_template("{{ messages }}"), ToolCallFormat::Generic);
}

TEST(ToolCalls, HermesCallsAndTheContentAroundThem) {
  ParsedReply r =
      parse(ToolCallFormat::Hermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", "
            "\"arguments\": \"{\\\"tz\\\": \\\"JST\\\"}\"}</tool_call>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":2})");  // key order kept
  EXPECT_EQ(r.calls[1].arguments, R"({"tz":"JST"})");               // a string argument decoded
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.calls[0].id.size(), 29u);
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // An unterminated last call (max_tokens hit after the JSON) still parses.
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"get_time\"}").calls.size(), 1u);
  // A last call cut short (max_tokens) is dropped; the complete ones stay.
  EXPECT_EQ(parse(ToolCallFormat::Hermes,
                  "<tool_call>{\"name\": \"get_time\"}</tool_call>\n<tool_call>{\"name\": \"get_we")
                .calls.size(),
            1u);
}

TEST(ToolCalls, OtherFamilies) {
  ParsedReply llama =
      parse(ToolCallFormat::Llama3,
            "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}");
  ASSERT_EQ(llama.calls.size(), 1u);
  EXPECT_EQ(llama.calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_EQ(parse(ToolCallFormat::Llama3,
                  "{\"name\": \"get_time\", \"parameters\": {}}; "
                  "{\"name\": \"get_weather\", \"parameters\": {}}")
                .calls.size(),
            2u);
  ParsedReply mistral =
      parse(ToolCallFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]");
  ASSERT_EQ(mistral.calls.size(), 1u);
  EXPECT_EQ(mistral.calls[0].id.size(), 9u);  // Mistral's template insists on 9 characters
  ParsedReply tekken =
      parse(ToolCallFormat::Mistral, "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}");
  ASSERT_EQ(tekken.calls.size(), 1u);
  EXPECT_EQ(tekken.calls[0].name, "get_time");
  ParsedReply functionary =
      parse(ToolCallFormat::FunctionaryV31, "<function=get_time>{\"tz\": \"PST\"}</function>");
  ASSERT_EQ(functionary.calls.size(), 1u);
  EXPECT_EQ(functionary.calls[0].arguments, R"({"tz":"PST"})");
  EXPECT_EQ(
      parse(ToolCallFormat::Generic, "```json\n[{\"name\": \"get_time\", \"arguments\": {}}]\n```")
          .calls.size(),
      1u);
}

TEST(ToolCalls, InvalidCallsStayContent) {
  for (const std::string text :
       {"<tool_call>{\"name\": \"no_such_tool\", \"arguments\": {}}</tool_call>",
        "<tool_call>{not json}</tool_call>", "just text",
        "{\"name\": \"get_time\", \"arguments\": 3}"}) {
    ParsedReply r = parse(text[0] == '{' ? ToolCallFormat::Generic : ToolCallFormat::Hermes, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCalls, StreamingHoldsWhatCouldBeACall) {
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Hermes, "Hello <tool"), 6u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Hermes, "Hello <b>"), 9u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Hermes, "Hi<tool_call>{\"na"), 2u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Mistral, "x [TOOL_"), 2u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Generic, "  {\"name\""), 0u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Generic, "  "), 0u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Llama3, "<|pyth"), 0u);
  EXPECT_EQ(streamable_prefix(ToolCallFormat::Llama3, "Sure, here"), 10u);
}

TEST(ToolCalls, RequestFieldsAreChecked) {
  auto req = [](const std::string& extra) {
    return parse_tool_request(ojson::parse(
        R"({"tools": [{"type": "function", "function": {"name": "f"}}])" + extra + "}"));
  };
  EXPECT_TRUE(req("").active());
  EXPECT_EQ(req(R"(, "tool_choice": "none")").choice, ToolChoice::None);
  EXPECT_FALSE(req(R"(, "tool_choice": "none")").active());
  ToolRequest named = req(
      R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false)");
  EXPECT_EQ(named.choice, ToolChoice::Named);
  EXPECT_EQ(named.function, "f");
  EXPECT_FALSE(named.parallel);
  auto field_of = [](const std::string& body) {
    try {
      parse_tool_request(ojson::parse(body));
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("<accepted>");
  };
  EXPECT_EQ(field_of(R"({"tools": {}})"), "tools");
  EXPECT_EQ(field_of(R"({"tools": [{"type": "code_interpreter"}]})"), "tools[0]");
  EXPECT_EQ(field_of(R"({"tools": [{"type": "function", "function": {"name": ""}}]})"),
            "tools[0].function.name");
  EXPECT_EQ(field_of(R"({"tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(
      field_of(
          R"({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "maybe"})"),
      "tool_choice");
  EXPECT_EQ(
      field_of(
          R"({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})"),
      "tool_choice");
}

TEST(ToolCalls, ResponseShapes) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto tokenizer = load_tokenizer_from_gguf(model.string());
  auto parsed =
      parse_request(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "get_time"}}]})");
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(parsed));
  ApiRequest req = std::get<ApiRequest>(parsed);
  req.tool_format = ToolCallFormat::Hermes;
  ResponseMeta meta{"chatcmpl-1", 1, "m"};
  Completion c;
  c.text = "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>";
  c.finish_reason = FinishReason::Stop;
  Completion plain;
  plain.text = "no call here";
  plain.finish_reason = FinishReason::Stop;
  auto j = completion_response(req, meta, {c, plain}, *tokenizer);
  const auto& msg = j["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null()) << j.dump();
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"tz":"UTC"})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "no call here");
  EXPECT_FALSE(j["choices"][1]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  std::string chunk = tool_calls_chunk(
      req, meta, parse_tool_calls(ToolCallFormat::Hermes, c.text, *req.tools.tools, 1).calls);
  auto delta = nlohmann::json::parse(chunk.substr(6))["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(delta["index"], 0);
  EXPECT_EQ(delta["function"]["name"], "get_time");
}

}  // namespace
}  // namespace ember::server
