// How `ember serve` answers fields it does not handle: OpenAI fields that would change the output
// are refused by name, harmless ones accepted, fields no API knows ignored with a warning in the
// log (or refused with --strict-api); and /metrics under vLLM's names too.
#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>
#include <thread>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

TEST(ServerFields, UnknownIgnoredWithAWarningOrRefusedWhenStrict) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  test::ServerProcess lenient("-m " + test::shell_quote(model.string()) + " -t 2");
  ASSERT_TRUE(lenient.ready()) << lenient.startup_error();
  auto r = test::post_json(lenient.port(), "/v1/chat/completions",
                           {{"messages", hi},
                            {"max_tokens", 2},
                            {"guided_choice", {"a"}},
                            {"store", true},
                            {"metadata", {{"k", "v"}}}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(lenient.log().find("ignored unknown request field(s) 'guided_choice'"),
            std::string::npos)
      << lenient.log();
  // An OpenAI field that would change the output is refused whatever the mode.
  r = test::post_json(lenient.port(), "/v1/chat/completions",
                      {{"messages", hi}, {"verbosity", "low"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "verbosity");

  test::ServerProcess strict("-m " + test::shell_quote(model.string()) + " -t 2 --strict-api");
  ASSERT_TRUE(strict.ready()) << strict.startup_error();
  r = test::post_json(strict.port(), "/v1/chat/completions",
                      {{"messages", hi}, {"max_tokens", 2}, {"guided_choice", {"a"}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "guided_choice");
  r = test::post_json(strict.port(), "/v1/chat/completions",
                      {{"messages", hi}, {"max_tokens", 2}, {"store", false}, {"user", "u"}});
  EXPECT_EQ(r.status, 200) << "harmless fields pass even in strict mode: " << r.body;
}

TEST(ServerFields, MetricsUnderVllmNamesAndModelsWithTheContext) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --model-name tiny");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  ASSERT_EQ(
      test::post_json(server.port(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 5}})
          .status,
      200);
  // The gauges settle at the end of the engine step that finished the request.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = test::http_get(server.port(), "/metrics").body;
    if (m.find("vllm:num_requests_running{model_name=\"tiny\"} 0") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const char* line :
       {"vllm:num_requests_running{model_name=\"tiny\"} 0",
        "vllm:generation_tokens_total{model_name=\"tiny\"} 5",
        "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1",
        "vllm:time_per_output_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 4"}) {
    EXPECT_NE(m.find(line), std::string::npos) << line << "\n" << m;
  }
  const json models = json::parse(test::http_get(server.port(), "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 2048);  // stories260K's context
}

TEST(ServerFields, CorsOnlyForTheGivenOriginsAndRetryAfterWhenFull) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " -t 2 --cors-origin http://app.example --max-seqs 1 --max-waiting 1"
                             " --api-key k3y-for-cors");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());
  // Preflight: answered without the key, naming what may follow.
  auto pre = client.Options("/v1/completions", {{"Origin", "http://app.example"},
                                                {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 3}}.dump();
  const httplib::Headers auth = {{"Authorization", "Bearer k3y-for-cors"}};
  httplib::Headers from_app = auth;
  from_app.emplace("Origin", "http://app.example");
  auto ok = client.Post("/v1/completions", from_app, body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  httplib::Headers from_elsewhere = auth;
  from_elsewhere.emplace("Origin", "http://evil.example");
  auto refused = client.Post("/v1/completions", from_elsewhere, body, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_TRUE(refused->get_header_value("Access-Control-Allow-Origin").empty());

  // One sequence, one queue place: concurrent long requests beyond two get 503 + Retry-After.
  const std::string slow =
      json{{"prompt", "Once"}, {"max_tokens", 1500}, {"ignore_eos", true}}.dump();
  std::mutex mutex;
  std::vector<std::pair<int, std::string>> results;
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(60, 0);
      auto r = c.Post("/v1/completions", auth, slow, "application/json");
      std::lock_guard<std::mutex> lock(mutex);
      results.emplace_back(r ? r->status : 0, r ? r->get_header_value("Retry-After") : "");
    });
  }
  for (std::thread& t : clients) t.join();
  int full = 0, served = 0;
  for (const auto& [status, retry] : results) {
    if (status == 503) {
      ++full;
      EXPECT_EQ(retry, "1");
    }
    served += status == 200;
  }
  EXPECT_GE(served, 1);
  EXPECT_GE(full, 1) << "six requests for one sequence and one queue place";
}

}  // namespace
}  // namespace ember
