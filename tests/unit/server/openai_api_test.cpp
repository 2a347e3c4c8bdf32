// The OpenAI wire format without sockets: request validation and the exact response/chunk shapes.
#include <gtest/gtest.h>

#include "ember/model/model_loader.h"
#include "ember/server/error_response.h"
#include "ember/server/openai_api.h"
#include "test_util.h"

namespace ember::server {
namespace {

using nlohmann::json;

void expect_error(Endpoint e, const std::string& body, const std::string& param) {
  auto r = parse_request(e, body);
  ASSERT_TRUE(std::holds_alternative<Error>(r)) << body;
  const Error& err = std::get<Error>(r);
  EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument) << body;
  EXPECT_EQ(err.field(), param) << body << " -> " << err.what();
  ErrorResponse res = to_openai_error(err);
  EXPECT_EQ(res.status, 400) << body;
  EXPECT_EQ(res.body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(res.body["error"]["message"], err.what());
}

ApiRequest expect_ok(Endpoint e, const std::string& body) {
  auto r = parse_request(e, body);
  if (auto* err = std::get_if<Error>(&r)) {
    ADD_FAILURE() << body << " -> " << err->what();
    return {};
  }
  return std::get<ApiRequest>(r);
}

TEST(ServerOpenAIApi, ParsesEveryCompletionField) {
  ApiRequest r = expect_ok(Endpoint::Completions, R"({
    "model": "m", "prompt": "hi", "max_tokens": 12, "temperature": 0.5, "top_p": 0.9,
    "top_k": 7, "min_p": 0.1, "seed": 42, "stop": ["a", ""], "stream": true,
    "stream_options": {"include_usage": true}, "n": 1, "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "logprobs": 3, "ignore_eos": true, "user": "x"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.generation.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.generation.sampling.top_p, 0.9f);
  EXPECT_EQ(r.generation.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(r.generation.sampling.min_p, 0.1f);
  EXPECT_EQ(r.generation.sampling.seed, 42u);
  EXPECT_EQ(r.generation.stop, std::vector<std::string>{"a"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FLOAT_EQ(r.generation.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.generation.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.generation.logprobs, 3);
  EXPECT_TRUE(r.generation.ignore_eos);

  ApiRequest ids = expect_ok(Endpoint::Completions, R"({"prompt": [1, 2, 3], "stop": "x"})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.generation.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(ids.max_tokens.has_value());
  // OpenAI defaults, not ember run's.
  EXPECT_FLOAT_EQ(ids.generation.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(ids.generation.sampling.top_p, 1.0f);
  EXPECT_EQ(ids.generation.sampling.top_k, 0);
  EXPECT_EQ(ids.generation.logprobs, -1);
  EXPECT_EQ(
      expect_ok(Endpoint::Completions, R"({"prompt": "a", "max_completion_tokens": 9})").max_tokens,
      9);
}

TEST(ServerOpenAIApi, ParsesChatMessages) {
  ApiRequest r = expect_ok(Endpoint::ChatCompletions, R"({"messages": [
    {"role": "developer", "content": "be nice"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null}], "logprobs": true, "top_logprobs": 2})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_TRUE(r.chat_logprobs);
  EXPECT_EQ(r.generation.logprobs, 2);
}

TEST(ServerOpenAIApi, ToolMessagesReachTheTemplateInOrder) {
  ApiRequest r = expect_ok(Endpoint::ChatCompletions, R"({"messages": [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "c1",
      "type": "function", "function": {"name": "get", "arguments": "{\"z\": 1, \"a\": [2]}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "get", "content": "sunny"}],
    "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_TRUE(r.messages[1].extra);
  // arguments decoded into an object, keys in the client's order (tojson prints them so).
  EXPECT_EQ(
      r.messages[1].extra->dump(),
      R"({"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":{"z":1,"a":[2]}}}]})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].extra->dump(), R"({"tool_call_id":"c1","name":"get"})");
  ASSERT_TRUE(r.chat_template_kwargs);
  EXPECT_EQ(r.chat_template_kwargs->dump(), R"({"enable_thinking":false})");
  EXPECT_FALSE(r.messages[0].extra);
}

TEST(ServerOpenAIApi, RejectsBadToolMessages) {
  auto chat = Endpoint::ChatCompletions;
  expect_error(chat, R"({"messages": [{"role": "tool", "content": "x"}]})",
               "messages[0].tool_call_id");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "x", "audio": {}}]})",
               "messages[0].audio");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
               "messages[0].tool_calls");
  expect_error(
      chat,
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]}]})",
      "messages[0].tool_calls[0].function.arguments");
  expect_error(chat,
               R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]})",
               "messages[0].tool_calls[0]");
  expect_error(chat,
               R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
               "chat_template_kwargs");
}

TEST(ServerOpenAIApi, RejectsBadRequestsNamingTheParameter) {
  auto c = Endpoint::Completions, chat = Endpoint::ChatCompletions;
  expect_error(c, "{", "");
  expect_error(c, "42", "");
  expect_error(c, "{}", "prompt");
  expect_error(c, R"({"prompt": {"a": 1}})", "prompt");
  expect_error(c, R"({"prompt": ["a", "b"]})", "prompt");
  expect_error(c, R"({"prompt": "a", "max_tokens": -1})", "max_tokens");
  expect_error(c, R"({"prompt": "a", "max_tokens": 0})", "max_tokens");
  expect_error(c, R"({"prompt": "a", "max_tokens": "5"})", "max_tokens");
  expect_error(c, R"({"prompt": "a", "temperature": 3})", "temperature");
  expect_error(c, R"({"prompt": "a", "top_p": "x"})", "top_p");
  expect_error(c, R"({"prompt": "a", "n": 17})", "n");
  expect_error(c, R"({"prompt": "a", "n": 0})", "n");
  expect_error(c, R"({"prompt": "a", "stop": 5})", "stop");
  expect_error(c, R"({"prompt": "a", "stream": 1})", "stream");
  expect_error(c, R"({"prompt": "a", "logprobs": true})", "logprobs");
  expect_error(c, R"({"prompt": "a", "logprobs": 50})", "logprobs");
  expect_error(c, R"({"prompt": "a", "presence_penalty": 5})", "presence_penalty");
  expect_error(c, R"({"prompt": "a", "echo": 1})", "echo");
  expect_error(c, R"({"prompt": "a", "max_tokens": 0})", "max_tokens");
  expect_error(chat, "{}", "messages");
  expect_error(chat, R"({"messages": []})", "messages");
  expect_error(chat, R"({"messages": "hi"})", "messages");
  expect_error(chat, R"({"messages": [{"content": "x"}]})", "messages[0].role");
  expect_error(chat, R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role");
  expect_error(chat, R"({"messages": [{"role": "user", "content": 1}]})", "messages[0].content");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
               "top_logprobs");
}

class ServerOpenAIApiFormat : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = test::fixture("models/stories260K/stories260K.gguf");
    EMBER_REQUIRE_FIXTURE(model);
    LoadOptions lo;
    lo.path = model.string();
    model_ = std::make_unique<LoadedModel>(load_model(lo));
  }
  const Tokenizer& tok() const { return *model_->tokenizer; }
  std::unique_ptr<LoadedModel> model_;
};

json parse_sse(const std::string& s) {
  EXPECT_EQ(s.rfind("data: ", 0), 0u) << s;
  EXPECT_EQ(s.substr(s.size() - 2), "\n\n") << s;
  return json::parse(s.substr(6));
}

TEST_F(ServerOpenAIApiFormat, ChatChunksAndResponse) {
  ApiRequest req = std::get<ApiRequest>(parse_request(
      Endpoint::ChatCompletions,
      R"({"messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": {"include_usage": true}})"));
  ResponseMeta meta{"chatcmpl-1", 1700000000, "m"};
  json role = parse_sse(chat_role_chunk(req, meta));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-1");
  EXPECT_EQ(role["created"], 1700000000);
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["usage"].is_null());
  json delta = parse_sse(delta_chunk(req, meta, "Hi", {}, tok(), 0));
  EXPECT_EQ(delta["choices"][0]["delta"], json({{"content", "Hi"}}));
  EXPECT_TRUE(delta["choices"][0]["finish_reason"].is_null());
  json fin = parse_sse(finish_chunk(req, meta, FinishReason::Length));
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  Completion c;
  c.text = "Hi";
  c.prompt_tokens = 5;
  c.completion_tokens = 2;
  c.cached_prompt_tokens = 0;
  c.finish_reason = FinishReason::Stop;
  json usage = parse_sse(usage_chunk(req, meta, c));
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json({{"prompt_tokens", 5},
                                  {"completion_tokens", 2},
                                  {"total_tokens", 7},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  json full = completion_response(req, meta, {c}, tok());
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(full["usage"]["total_tokens"], 7);
}

TEST_F(ServerOpenAIApiFormat, CompletionLogprobs) {
  ApiRequest req = std::get<ApiRequest>(
      parse_request(Endpoint::Completions, R"({"prompt": "x", "logprobs": 1})"));
  ResponseMeta meta{"cmpl-1", 1, "m"};
  TokenLogprob lp;
  lp.token = 300;
  lp.logprob = -0.25f;
  lp.top = {{300, -0.25f}};
  Completion c;
  c.text = tok().token_bytes(300);
  c.tokens = {300};
  c.logprobs = {lp};
  c.finish_reason = FinishReason::Length;
  json full = completion_response(req, meta, {c}, tok());
  EXPECT_EQ(full["object"], "text_completion");
  const json& l = full["choices"][0]["logprobs"];
  EXPECT_EQ(l["tokens"], json::array({tok().token_bytes(300)}));
  EXPECT_FLOAT_EQ(l["token_logprobs"][0].get<float>(), -0.25f);
  EXPECT_EQ(l["top_logprobs"][0].size(), 1u);
  EXPECT_EQ(l["text_offset"], json::array({0}));
  json chunk = parse_sse(delta_chunk(req, meta, "a", {lp}, tok(), 4));
  EXPECT_EQ(chunk["choices"][0]["text"], "a");
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], json::array({4}));
}

}  // namespace
}  // namespace ember::server
