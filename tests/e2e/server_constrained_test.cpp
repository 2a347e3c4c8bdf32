// Constrained decoding through `ember serve` (stories260K, which knows nothing of JSON): every
// response_format json_schema reply validates against its schema, tool_choice required makes a
// call (whole and streamed) that names an offered function with valid arguments, a GBNF `grammar`
// on /v1/completions, and 400s naming the field for what cannot be enforced.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

std::filesystem::path corpus() {
  return test::source_dir() / "tests/chat_templates";
}

// python3-jsonschema's verdict on `doc`; skips the check (true) where it is not installed.
bool validates(const json& schema, const json& doc, std::string* why) {
  std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import jsonschema' 2>/dev/null").c_str()) != 0) return true;
  auto dir = test::scratch_dir("schema-check");
  std::ofstream(dir / "s.json") << schema.dump();
  std::ofstream(dir / "d.json") << doc.dump();
  std::string out;
  int rc = test::run_shell(
      python +
          " -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), "
          "json.load(open(sys.argv[1])))' " +
          (dir / "s.json").string() + " " + (dir / "d.json").string() + " 2>&1",
      &out);
  *why = out;
  return rc == 0;
}

class ServerConstrained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model)) return;
    server_ = std::make_unique<test::ServerProcess>(
        "-m " + test::shell_quote(model.string()) + " -t 2 --chat-template " +
        test::shell_quote((corpus() / "templates/qwen2.5-7b-instruct.jinja").string()));
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    EMBER_REQUIRE_FIXTURE(test::fixture("models/stories260K/stories260K.gguf"));
    ASSERT_TRUE(server_ && server_->ready()) << (server_ ? server_->startup_error() : "");
  }
  static std::unique_ptr<test::ServerProcess> server_;
};
std::unique_ptr<test::ServerProcess> ServerConstrained::server_;

const json kUser = json::array({{{"role", "user"}, {"content", "Once upon a time"}}});

TEST_F(ServerConstrained, JsonSchemaRepliesValidate) {
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"mood", {{"enum", {"happy", "sad"}}}},
        {"count", {{"type", "integer"}, {"minimum", 0}}},
        {"items", {{"type", "array"}, {"items", {{"type", "boolean"}}}, {"maxItems", 2}}}}},
      {"required", {"mood", "count", "items"}},
      {"additionalProperties", false}};
  for (int seed = 0; seed < 4; ++seed) {
    json body = {{"messages", kUser},
                 {"max_tokens", 200},
                 {"temperature", 1.0},
                 {"seed", seed},
                 {"response_format",
                  {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
    auto r = test::post_json(server_->port(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json reply = json::parse(r.body)["choices"][0];
    if (reply["finish_reason"] != "stop") continue;  // ran out of max_tokens mid-document
    json doc = json::parse(reply["message"]["content"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << reply.dump();
    std::string why;
    EXPECT_TRUE(validates(schema, doc, &why)) << doc.dump() << "\n" << why;
  }
  auto obj = test::post_json(server_->port(), "/v1/chat/completions",
                             {{"messages", kUser},
                              {"max_tokens", 40},
                              {"temperature", 0},
                              {"response_format", {{"type", "json_object"}}}});
  ASSERT_EQ(obj.status, 200) << obj.body;
  std::string content = json::parse(obj.body)["choices"][0]["message"]["content"];
  EXPECT_EQ(content.rfind("{", 0), 0u) << content;
}

TEST_F(ServerConstrained, RequiredToolChoiceMakesAValidCall) {
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "set_light"},
          {"parameters",
           {{"type", "object"},
            {"properties",
             {{"on", {{"type", "boolean"}}}, {"room", {{"enum", {"kitchen", "hall"}}}}}},
            {"required", {"on", "room"}}}}}}},
       {{"type", "function"},
        {"function",
         {{"name", "noop"},
          {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  json body = {{"messages", kUser},
               {"tools", tools},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "set_light"}}}}},
               {"parallel_tool_calls", false},
               {"max_tokens", 200},
               {"temperature", 0.8},
               {"seed", 3}};
  auto r = test::post_json(server_->port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "set_light");
  json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["on"].is_boolean()) << args.dump();
  EXPECT_TRUE(args["room"] == "kitchen" || args["room"] == "hall") << args.dump();
  EXPECT_TRUE(choice["message"]["content"].is_null());

  // Streamed: the call arrives as delta.tool_calls, the finish reason is tool_calls.
  body["stream"] = true;
  body["tool_choice"] = "required";
  auto s = test::post_json(server_->port(), "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  std::string name, finish;
  for (size_t pos = 0; (pos = s.body.find("data: {", pos)) != std::string::npos; ++pos) {
    json chunk = json::parse(s.body.substr(pos + 6, s.body.find("\n\n", pos) - pos - 6));
    if (chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    if (c["delta"].contains("tool_calls")) name = c["delta"]["tool_calls"][0]["function"]["name"];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    if (c["delta"].contains("content")) {
      EXPECT_EQ(c["delta"]["content"].get<std::string>().find("<tool_call>"), std::string::npos)
          << s.body;
    }
  }
  EXPECT_TRUE(name == "set_light" || name == "noop") << s.body;
  EXPECT_EQ(finish, "tool_calls") << s.body;
}

TEST_F(ServerConstrained, GrammarOnCompletions) {
  for (int seed = 0; seed < 3; ++seed) {
    auto r = test::post_json(server_->port(), "/v1/completions",
                             {{"prompt", "Lily said"},
                              {"max_tokens", 10},
                              {"temperature", 1.0},
                              {"seed", seed},
                              {"grammar", "root ::= \" \" (\"yes\" | \"no\") \".\""}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body)["choices"][0];
    EXPECT_TRUE(c["text"] == " yes." || c["text"] == " no.") << c.dump();
    EXPECT_EQ(c["finish_reason"], "stop");
  }
}

TEST_F(ServerConstrained, WhatCannotBeEnforcedIsRefused) {
  auto err = [&](const std::string& path, const json& body) {
    auto r = test::post_json(server_->port(), path, body);
    EXPECT_EQ(r.status, 400) << r.body;
    return json::parse(r.body)["error"];
  };
  EXPECT_EQ(
      err("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= undefined-rule"}})["param"],
      "grammar");
  const json bad_schema = {{"type", "string"}, {"pattern", "(a)\\1"}};
  const json format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "s"}, {"schema", bad_schema}}}};
  json e = err("/v1/chat/completions", {{"messages", kUser}, {"response_format", format}});
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_NE(e["message"].get<std::string>().find("pattern"), std::string::npos);
  EXPECT_EQ(err("/v1/chat/completions",
                {{"messages", kUser}, {"response_format", {{"type", "xml"}}}})["param"],
            "response_format");
  EXPECT_EQ(
      err("/v1/chat/completions", {{"messages", kUser}, {"tool_choice", "required"}})["param"],
      "tool_choice");
  EXPECT_EQ(test::http_get(server_->port(), "/health").status, 200);
}

}  // namespace
}  // namespace ember
