// "trace": true on a server started with --allow-trace: the response names the trace (header, and
// the body when not streamed), GET /trace/{id} serves its page, and the page's data are the traced
// request's own even when its steps were shared with other requests (the logit lens ranks each
// greedy token first, attention rows sum to 1, the tokens are the response's). Without
// --allow-trace the field is refused.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

// The JSON the page inlines.
json page_data(const std::string& html) {
  const std::string open = "id=\"trace-data\">";
  const size_t begin = html.find(open);
  const size_t end = html.find("</script>", begin);
  if (begin == std::string::npos || end == std::string::npos) return json();
  return json::parse(html.substr(begin + open.size(), end - begin - open.size()), nullptr, false);
}

TEST(ServerTrace, RefusedWithoutAllowTrace) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  auto r = test::post_json(server.port(), "/v1/completions",
                           {{"prompt", "Hi"}, {"max_tokens", 2}, {"trace", true}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "trace") << r.body;
  EXPECT_EQ(test::http_get(server.port(), "/trace/trace-1").status, 404);
}

TEST(ServerTrace, TracedRequestAmongOthersGetsItsOwnPage) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --allow-trace");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int port = server.port();
  // Others decode while the traced request prefills and decodes: its steps are shared.
  std::vector<std::future<test::HttpResult>> others;
  for (int i = 0; i < 3; ++i) {
    others.push_back(std::async(std::launch::async, [port, i] {
      return test::post_json(
          port, "/v1/completions",
          {{"prompt", "Tom " + std::to_string(i)}, {"max_tokens", 400}, {"ignore_eos", true}});
    }));
  }
  for (int i = 0; i < 200 && test::server_metrics(port)["ember_sequences_running"] < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto r = test::post_json(port, "/v1/completions",
                           {{"prompt", "Once upon a time"},
                            {"max_tokens", 12},
                            {"temperature", 0},
                            {"ignore_eos", true},
                            {"trace", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  ASSERT_TRUE(body.contains("trace_id")) << r.body;
  for (auto& f : others) EXPECT_EQ(f.get().status, 200);
  const std::string id = body["trace_id"];
  const auto page = test::http_get(port, "/trace/" + id);
  ASSERT_EQ(page.status, 200) << page.body;
  const json j = page_data(page.body);
  ASSERT_TRUE(j.is_object()) << page.body.substr(0, 500);
  EXPECT_FALSE(j.contains("problem")) << j["problem"];
  const int64_t P = j["n_prompt"], L = j["model"]["n_layers"];
  ASSERT_EQ(j["tokens"].size(), static_cast<size_t>(P + 12));
  std::string text;
  for (size_t i = static_cast<size_t>(P); i < j["tokens"].size(); ++i) {
    text += j["tokens"][i]["text"].get<std::string>();
  }
  EXPECT_EQ(text, body["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(text, test::ember_run_greedy(model.string(), "Once upon a time", 12, true));
  // Greedy: the last layer ranks each generated token first where it was predicted.
  const json& last = j["logit_lens"]["layers"][static_cast<size_t>(L)]["cells"];
  int64_t checked = 0;
  for (const json& cell : last) {
    const int64_t p = cell["position"];
    if (p < P - 1) continue;
    EXPECT_EQ(cell["next_rank"], 0) << p;
    EXPECT_EQ(cell["next"], j["tokens"][static_cast<size_t>(p + 1)]["id"]);
    ++checked;
  }
  EXPECT_EQ(checked, 12);
  for (const json& layer : j["attention"]["layers"]) {
    for (const json& head : layer["heads"]) {
      for (const json& row : head["rows"]) {
        double sum = 0;
        for (const json& w : row["weights"]) sum += w.get<double>();
        EXPECT_NEAR(sum, 1.0, 1e-4);  // weights to 6 decimals in the JSON
      }
    }
  }
  int64_t shared = 0;
  for (const json& step : j["roofline"]["steps"])
    shared += step["batch_sequences"].get<int64_t>() > 1;
  EXPECT_GT(shared, 0) << "the traced request never shared a step: the test did not test that";
}

TEST(ServerTrace, StreamedRequestNamesItsTraceInAHeader) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --allow-trace");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());
  auto r = client.Post("/v1/chat/completions",
                       json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                            {"max_tokens", 6},
                            {"stream", true},
                            {"trace", true}}
                           .dump(),
                       "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string id = r->get_header_value("X-Ember-Trace-Id");
  ASSERT_FALSE(id.empty());
  EXPECT_NE(r->body.find("[DONE]"), std::string::npos);
  const auto page = test::http_get(server.port(), "/trace/" + id);
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_TRUE(page_data(page.body).is_object());
}

}  // namespace
}  // namespace ember
