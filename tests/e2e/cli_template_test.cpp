// `ember template`: the rendered prompt of a real template, its token ids, tools and errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ember {
namespace {

std::filesystem::path corpus() {
  return test::source_dir() / "tests/chat_templates";
}

std::string golden(const std::string& tmpl, const std::string& c) {
  std::ifstream in(corpus() / "expected.json");
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& r : j["renders"]) {
    if (r["template"] == tmpl && r["case"] == c) return r["output"];
  }
  return "<no golden>";
}

// The renders need no particular tokenizer: stories260K loads fastest (the sanitizer build runs
// these too); the --ids check uses SmolLM2's, whose vocabulary has the ChatML tokens.
std::string args(const std::string& tmpl, const std::string& c,
                 const std::string& model = "models/stories260K/stories260K.gguf") {
  auto dir = test::fixture(model);
  return "template -m " + test::shell_quote(dir.string()) + " --chat-template " +
         test::shell_quote((corpus() / "templates" / tmpl).string()) + " --messages " +
         test::shell_quote((corpus() / "cases" / c).string());
}

TEST(CliTemplate, PrintsWhatJinja2Renders) {
  EMBER_REQUIRE_FIXTURE(test::fixture("models/stories260K/stories260K.gguf"));
  // The case files hold add_generation_prompt; the CLI opens the assistant turn unless told not to.
  auto r = test::run_ember(args("qwen2.5-7b-instruct.jinja", "system_user.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, golden("qwen2.5-7b-instruct.jinja", "system_user.json"));
  auto final_turn = test::run_ember(args("qwen2.5-7b-instruct.jinja", "assistant_final.json") +
                                    " --no-generation-prompt");
  ASSERT_EQ(final_turn.exit_code, 0) << final_turn.err;
  EXPECT_EQ(final_turn.out, golden("qwen2.5-7b-instruct.jinja", "assistant_final.json"));
}

TEST(CliTemplate, ToolsReachTheTemplateAndIdsParseSpecialTokens) {
  EMBER_REQUIRE_FIXTURE(test::fixture("models/smollm2-135m-instruct/tokenizer.json"));
  auto case_file = corpus() / "cases/tools_offered.json";
  auto r = test::run_ember(args("qwen2.5-7b-instruct.jinja", "tools_offered.json") + " --tools " +
                           test::shell_quote(case_file.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, golden("qwen2.5-7b-instruct.jinja", "tools_offered.json"));
  auto ids = test::run_ember(
      args("smollm2-1.7b-instruct.jinja", "single_user.json", "models/smollm2-135m-instruct") +
      " --ids");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(ids.out.rfind("1 ", 0), 0u) << "<|im_start|> is token 1: " << ids.out;
}

TEST(CliTemplate, ErrorsNameTheProblem) {
  EMBER_REQUIRE_FIXTURE(test::fixture("models/stories260K/stories260K.gguf"));
  // Gemma 2's template refuses a system turn with its own message.
  auto gemma = test::run_ember(args("gemma2-2b-it.jinja", "system_user.json"));
  EXPECT_EQ(gemma.exit_code, 1);
  EXPECT_NE(gemma.err.find("System role not supported"), std::string::npos) << gemma.err;
  auto bad = test::scratch_dir("cli_template") / "bad.jinja";
  std::ofstream(bad) << "{% for m in messages %}{{ m.content }";
  auto syntax = test::run_ember(
      "template -m " +
      test::shell_quote(test::fixture("models/stories260K/stories260K.gguf").string()) +
      " --chat-template " + test::shell_quote(bad.string()) + " --messages " +
      test::shell_quote((corpus() / "cases/single_user.json").string()));
  EXPECT_EQ(syntax.exit_code, 1);
  EXPECT_NE(syntax.err.find("line 1"), std::string::npos) << syntax.err;
  auto name = test::run_ember(args("no-such-template", "single_user.json"));
  EXPECT_EQ(name.exit_code, 1);
  EXPECT_NE(name.err.find("neither a template file nor a built-in format"), std::string::npos)
      << name.err;
}

}  // namespace
}  // namespace ember
