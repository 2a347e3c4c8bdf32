// `ember serve` driven by the official `openai` npm package: a chat completion, a streaming chat
// completion, a completion, an error, and 32 concurrent streams (Promise.all), compared with
// `ember run --temp 0`. The package is installed into the build tree on first use; the test
// skips (with the reason) when node/npm are missing or the install fails (e.g. offline).
#include <gtest/gtest.h>

#include <fstream>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

const char* kClientScript = R"JS(
import OpenAI from 'openai';
const baseURL = process.argv[2];
const model = 'stories260K';
const client = new OpenAI({ baseURL, apiKey: 'sk-ember-test', maxRetries: 0, timeout: 60000 });
const out = {};

const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 40, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.chat_role = chat.choices[0].message.role;
out.chat_usage = chat.usage;

const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 40, temperature: 0,
  stream: true, stream_options: { include_usage: true } });
out.stream = ''; out.stream_roles = 0; out.stream_finish = null; out.stream_usage = null;
for await (const chunk of stream) {
  if (chunk.usage) out.stream_usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) out.stream_roles++;
  if (c.delta.content) out.stream += c.delta.content;
  if (c.finish_reason) out.stream_finish = c.finish_reason;
}

const completion = await client.completions.create({
  model, prompt: 'Lily and Ben', max_tokens: 30, temperature: 0 });
out.completion = completion.choices[0].text;
out.completion_finish = completion.choices[0].finish_reason;

try {
  await client.chat.completions.create({ model, messages: [] });
  out.error_status = 0;
} catch (e) {
  out.error_status = e.status;
  out.error_param = e.param ?? null;
}

const runs = [];
for (let i = 0; i < 32; i++) {
  runs.push((async () => {
    const s = await client.completions.create({
      model, prompt: 'Tom ' + i, max_tokens: 4 + i, temperature: 0.7, seed: i, ignore_eos: true,
      stream: true, stream_options: { include_usage: true } });
    let usage = null;
    for await (const chunk of s) if (chunk.usage) usage = chunk.usage;
    return usage ? usage.completion_tokens : -1;
  })());
}
out.concurrent = await Promise.all(runs);
console.log(JSON.stringify(out));
)JS";

// The API's newer surface through the official client: a tool round trip (the call forced by
// tool_choice, its result sent back, an answer), json_schema output, n = 3, logprobs, a stream
// with usage, and an unknown field refused (the server runs with --strict-api).
const char* kApiScript = R"JS(
import OpenAI from 'openai';
const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'sk-ember-test', maxRetries: 0, timeout: 60000 });
const model = 'stories260K';
const out = {};
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] }, celsius: { type: 'boolean' } },
                required: ['city', 'celsius'] } } }];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const call = await client.chat.completions.create({ model, messages, tools, parallel_tool_calls: false,
  tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, temperature: 0 });
out.call_finish = call.choices[0].finish_reason;
out.call = call.choices[0].message.tool_calls?.[0] ?? null;
if (out.call) {
  messages.push(call.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: out.call.id, content: '{"temperature": 21}' });
  const answer = await client.chat.completions.create({ model, messages, tools, max_tokens: 20, temperature: 0 });
  out.answer = answer.choices[0].message.content;
  out.answer_finish = answer.choices[0].finish_reason;
}
const schema = { type: 'object', properties: { mood: { enum: ['happy', 'sad'] }, stars: { type: 'integer', minimum: 0 } },
                 required: ['mood', 'stars'], additionalProperties: false };
out.schema = schema;
const structured = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Rate it' }],
  response_format: { type: 'json_schema', json_schema: { name: 'rating', schema, strict: true } },
  max_tokens: 100, temperature: 0.7, seed: 5 });
out.structured = structured.choices[0].message.content;
out.structured_finish = structured.choices[0].finish_reason;
const three = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Once upon a time' }],
  n: 3, max_tokens: 8, temperature: 1.0, seed: 1, logprobs: true, top_logprobs: 2 });
out.n = three.choices.length;
out.indexes = three.choices.map(c => c.index);
out.logprob_tokens = three.choices[0].logprobs.content.length;
out.top_logprobs = three.choices[0].logprobs.content[0].top_logprobs.length;
const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Lily' }],
  max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
out.stream_text = ''; out.stream_usage = null;
for await (const chunk of stream) {
  if (chunk.usage) out.stream_usage = chunk.usage;
  if (chunk.choices[0]?.delta?.content) out.stream_text += chunk.choices[0].delta.content;
}
try {
  await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], frobnicate: 1 });
  out.unknown_status = 200;
} catch (e) {
  out.unknown_status = e.status;
  out.unknown_param = e.param ?? null;
}
console.log(JSON.stringify(out));
)JS";

std::string install_openai(const std::filesystem::path& dir) {
  return test::npm_install(dir, "openai");
}

TEST(ServerOpenAINode, OfficialClientChatStreamCompletionAndConcurrency) {
  auto model = test::fixture("models/stories260K/stories260K.gguf").string();
  EMBER_REQUIRE_FIXTURE(model);
  auto dir = std::filesystem::path(test::ember_binary()).parent_path() / "openai-node";
  std::string why = install_openai(dir);
  if (!why.empty()) GTEST_SKIP() << why;
  std::ofstream(dir / "client.mjs") << kClientScript;

  test::ServerProcess server("-m " + test::shell_quote(model) + " -t 2 --max-seqs 32");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  std::string out;
  int rc = test::run_shell("cd " + test::shell_quote(dir.string()) +
                               " && timeout 120 node client.mjs " + server.base_url() + "/v1 2>&1",
                           &out);
  ASSERT_EQ(rc, 0) << out << "\nserver log:\n" << server.log();
  json r = json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;

  std::string story = test::ember_run_greedy(model, "Once upon a time", 40);
  EXPECT_EQ(r["chat"], story);
  EXPECT_EQ(r["chat_role"], "assistant");
  EXPECT_EQ(r["chat_usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["stream"], story);
  EXPECT_EQ(r["stream_roles"], 1);
  EXPECT_TRUE(r["stream_finish"] == "length" || r["stream_finish"] == "stop") << out;
  EXPECT_EQ(r["stream_usage"]["completion_tokens"], r["chat_usage"]["completion_tokens"]);
  EXPECT_EQ(r["completion"], test::ember_run_greedy(model, "Lily and Ben", 30));
  EXPECT_EQ(r["error_status"], 400);
  EXPECT_EQ(r["error_param"], "messages");
  ASSERT_EQ(r["concurrent"].size(), 32u) << out;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(r["concurrent"][static_cast<size_t>(i)], 4 + i) << i;
  auto m = test::server_metrics(server.port());
  EXPECT_EQ(m["ember_requests_cancelled_total"], 0);
}

TEST(ServerOpenAINode, ToolsSchemaChoicesLogprobsUsageAndRefusal) {
  auto model = test::fixture("models/stories260K/stories260K.gguf").string();
  EMBER_REQUIRE_FIXTURE(model);
  auto dir = std::filesystem::path(test::ember_binary()).parent_path() / "openai-node";
  std::string why = install_openai(dir);
  if (!why.empty()) GTEST_SKIP() << why;
  std::ofstream(dir / "api.mjs") << kApiScript;
  const auto tmpl = test::source_dir() / "tests/chat_templates/templates/qwen2.5-7b-instruct.jinja";
  test::ServerProcess server("-m " + test::shell_quote(model) +
                             " -t 2 --strict-api --chat-template " +
                             test::shell_quote(tmpl.string()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  std::string out;
  int rc = test::run_shell("cd " + test::shell_quote(dir.string()) +
                               " && timeout 120 node api.mjs " + server.base_url() + "/v1 2>&1",
                           &out);
  ASSERT_EQ(rc, 0) << out << "\nserver log:\n" << server.log();
  json r = json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  // The call, its result, the answer.
  EXPECT_EQ(r["call_finish"], "tool_calls") << out;
  ASSERT_TRUE(r["call"].is_object()) << out;
  EXPECT_EQ(r["call"]["type"], "function");
  EXPECT_EQ(r["call"]["function"]["name"], "get_weather");
  json args = json::parse(r["call"]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << args;
  EXPECT_TRUE(args["celsius"].is_boolean()) << args;
  EXPECT_TRUE(r["answer"].is_string()) << out;
  // Structured output, validated against its schema.
  if (r["structured_finish"] == "stop") {
    json doc = json::parse(r["structured"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(doc.is_object()) << out;
    EXPECT_TRUE(doc["mood"] == "happy" || doc["mood"] == "sad") << doc;
    EXPECT_TRUE(doc["stars"].is_number_integer() && doc["stars"].get<int64_t>() >= 0) << doc;
    EXPECT_EQ(doc.size(), 2u) << doc;
  } else {
    ADD_FAILURE() << "the structured reply did not finish within max_tokens: " << out;
  }
  EXPECT_EQ(r["n"], 3);
  EXPECT_EQ(r["indexes"], json({0, 1, 2}));
  EXPECT_EQ(r["logprob_tokens"], 8);
  EXPECT_EQ(r["top_logprobs"], 2);
  EXPECT_EQ(r["stream_usage"]["completion_tokens"], 10) << out;
  EXPECT_FALSE(r["stream_text"].get<std::string>().empty());
  EXPECT_EQ(r["unknown_status"], 400);
  EXPECT_EQ(r["unknown_param"], "frobnicate");
}

}  // namespace
}  // namespace ember
