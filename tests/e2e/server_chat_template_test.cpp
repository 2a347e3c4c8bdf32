// `ember serve --chat-template FILE`: the Jinja template applied to chat requests, shown by
// /apply-template (llama.cpp's endpoint), and a template's refusal returned as a 400.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

std::filesystem::path corpus() {
  return test::source_dir() / "tests/chat_templates";
}

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(ServerChatTemplate, ApplyTemplateAndChatUseTheJinjaTemplate) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto tmpl = corpus() / "templates/chatml-openhermes-2.5-mistral-7b.jinja";
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --chat-template " +
                             test::shell_quote(tmpl.string()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());

  json conv = read_json(corpus() / "cases/multi_turn_system.json");
  json body = {{"messages", conv["messages"]}};
  auto r = client.Post("/apply-template", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string want;
  const json expected = read_json(corpus() / "expected.json");
  for (const auto& e : expected["renders"]) {
    if (e["template"] == tmpl.filename().string() && e["case"] == "multi_turn_system.json")
      want = e["output"];
  }
  EXPECT_EQ(json::parse(r->body)["prompt"], want);

  body["max_tokens"] = 4;
  body["temperature"] = 0;
  auto chat = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  // The ChatML template's prompt, tokenized, is what the model was given.
  const json usage = json::parse(chat->body)["usage"];
  auto tokenized = client.Post("/tokenize", json{{"content", want}}.dump(), "application/json");
  ASSERT_TRUE(tokenized);
  EXPECT_EQ(usage["prompt_tokens"], json::parse(tokenized->body)["tokens"].size()) << chat->body;
}

TEST(ServerChatTemplate, TheTemplatesRefusalIsA400NamingMessages) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server(
      "-m " + test::shell_quote(model.string()) + " -t 2 --chat-template " +
      test::shell_quote((corpus() / "templates/gemma2-2b-it.jinja").string()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());
  json body = {{"messages", json::array({{{"role", "system"}, {"content", "be brief"}},
                                         {{"role", "user"}, {"content", "hi"}}})}};
  for (const char* path : {"/v1/chat/completions", "/apply-template"}) {
    auto r = client.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j["error"]["param"], "messages") << r->body;
    EXPECT_NE(r->body.find("System role not supported"), std::string::npos) << r->body;
  }
  EXPECT_EQ(client.Get("/health")->status, 200);  // and the server stays up
}

TEST(ServerChatTemplate, ABadTemplateFileFailsAtStartup) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("bad-template");
  std::ofstream(dir / "t.jinja") << "{% if messages %}never closed";
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " --chat-template " +
                             test::shell_quote((dir / "t.jinja").string()));
  EXPECT_FALSE(server.ready());
  EXPECT_NE(server.log().find("endif"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace ember
