// Differential test of the Jinja engine: real chat templates (tests/chat_templates/templates)
// x conversation cases (tests/chat_templates/cases), rendered by ember and compared byte for
// byte with what Jinja2 renders under transformers' settings (expected.json, written by
// render_reference.py). A case the template rejects (raise_exception) must be rejected by ember
// too. ReferenceIsCurrent re-runs Jinja2 so the committed goldens cannot drift from it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/template.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

fs::path corpus_dir() {
  return test::source_dir() / "tests/chat_templates";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const nlohmann::ordered_json& expected() {
  static const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(read_file(corpus_dir() / "expected.json"));
  return j;
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  std::error_code ec;  // a missing corpus fails AtLeastThirtyTemplates, not test discovery
  for (const auto& entry : fs::directory_iterator(corpus_dir() / "templates", ec)) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

jinja::RenderOptions pinned_clock() {
  // render_reference.py pins strftime_now to 2024-07-26 12:00:00.
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  now.tm_hour = 12;
  now.tm_wday = 5;
  now.tm_yday = 207;
  jinja::RenderOptions options;
  options.now = now;
  return options;
}

// The first line where two renders differ, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i < 40 ? 0 : i - 40;
  return "at byte " + std::to_string(i) +
         "\n  jinja2: " + nlohmann::json(want.substr(from, 80)).dump() +
         "\n  ember:  " + nlohmann::json(got.substr(from, 80)).dump();
}

class ChatTemplateCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateCorpus, RendersLikeJinja2) {
  const std::string name = GetParam();
  std::unique_ptr<jinja::Template> tmpl;
  std::string parse_error;
  try {
    tmpl = std::make_unique<jinja::Template>(read_file(corpus_dir() / "templates" / name));
  } catch (const Error& e) {
    parse_error = e.what();
  }
  int checked = 0;
  for (const auto& r : expected()["renders"]) {
    if (r["template"] != name) continue;
    ++checked;
    const std::string case_name = r["case"];
    SCOPED_TRACE(name + " x " + case_name);
    ASSERT_TRUE(tmpl) << parse_error;
    // As transformers calls the template: special tokens, then its defaults (tools=None,
    // documents=None, add_generation_prompt=False), then the case's own arguments.
    auto vars = expected()["special_tokens"];
    for (const auto& [k, v] : expected()["context_defaults"].items()) vars[k] = v;
    auto case_vars = nlohmann::ordered_json::parse(read_file(corpus_dir() / "cases" / case_name));
    for (const auto& [k, v] : case_vars.items()) vars[k] = v;
    jinja::Value variables = jinja::Value::from_json(vars);
    if (r.contains("error")) {
      // raise_exception(msg) must raise with the template's own message; Python runtime errors
      // (str + dict, iterating None) must raise too, in ember's words.
      const std::string message = r["error"];
      try {
        tmpl->render(variables, pinned_clock());
        ADD_FAILURE() << "jinja2 raised (" << r["error_type"] << "): " << message;
      } catch (const Error& e) {
        if (r["error_type"] == "TemplateError") {
          EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
      }
      continue;
    }
    const std::string want = r["output"];
    try {
      std::string got = tmpl->render(variables, pinned_clock());
      EXPECT_TRUE(got == want) << first_difference(want, got);
    } catch (const Error& e) {
      ADD_FAILURE() << "ember raised: " << e.what();
    }
  }
  EXPECT_GT(checked, 0) << "expected.json has no renders of " << name;
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateCorpus, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 6);
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(ChatTemplateCorpusSize, AtLeastThirtyTemplatesAndEveryCase) {
  EXPECT_GE(template_names().size(), 30u);
  size_t cases = 0;
  for (const auto& entry : fs::directory_iterator(corpus_dir() / "cases")) {
    cases += entry.path().extension() == ".json";
  }
  EXPECT_EQ(expected()["renders"].size(), template_names().size() * cases);
}

// The goldens are Jinja2's own output: re-render with Debian's python3-jinja2 and compare.
TEST(ChatTemplateCorpusSize, ReferenceIsCurrent) {
  std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import jinja2' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP()
        << "python3-jinja2 is needed to re-render the goldens (scripts/setup.sh installs it)";
  }
  fs::path script = corpus_dir() / "render_reference.py";
  std::string cmd = python + " '" + script.string() + "' --check '" +
                    (corpus_dir() / "expected.json").string() + "' 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace ember
