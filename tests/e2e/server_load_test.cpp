// `ember serve` under load with stories260K: 32 concurrent streams, prefix-cache hits reported
// in usage and /metrics, preemption with a tiny KV pool, a client vanishing mid-stream, and a
// clean exit on SIGTERM.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string stories_model() {
  return test::fixture("models/stories260K/stories260K.gguf").string();
}

// Streams a completion, returning the SSE body and the usage chunk's completion_tokens.
struct StreamResult {
  int status = 0;
  std::string text;
  int64_t completion_tokens = -1;
  int text_chunks = 0;
  bool done = false;
  std::string error;  // client-side failure (connection refused, timeout, ...)
};

StreamResult stream_completion(int port, const json& request) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  StreamResult r;
  auto res = client.Post("/v1/completions", request.dump(), "application/json");
  if (!res) {
    r.error = httplib::to_string(res.error());
    return r;
  }
  r.status = res->status;
  const std::string& body = res->body;
  for (const std::string& e : test::sse_events(body)) {
    if (e == "[DONE]") {
      r.done = true;
      continue;
    }
    json c = json::parse(e, nullptr, false);
    if (c.is_discarded()) continue;
    if (c.contains("usage") && c["usage"].is_object()) {
      r.completion_tokens = c["usage"]["completion_tokens"];
    }
    if (!c["choices"].empty() && c["choices"][0]["finish_reason"].is_null()) {
      r.text += c["choices"][0]["text"].get<std::string>();
      ++r.text_chunks;
    }
  }
  return r;
}

// Waits until `pred(metrics)` holds (the engine updates its gauges after each step).
bool wait_for_metrics(int port, const std::function<bool(std::map<std::string, double>&)>& pred,
                      std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = test::server_metrics(port);
    if (pred(m)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

bool pool_is_idle(std::map<std::string, double>& m) {
  return m["ember_kv_blocks_used"] == 0 && m["ember_sequences_running"] == 0 &&
         m["ember_kv_blocks_free"] + m["ember_kv_blocks_cached"] == m["ember_kv_blocks_total"] &&
         m["ember_http_requests_in_flight"] == 0;
}

TEST(ServerLoad, ThirtyTwoConcurrentStreamsAllComplete) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) + " -t 2 --max-seqs 32");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  std::vector<std::future<StreamResult>> results;
  for (int i = 0; i < 32; ++i) {
    json req = {{"prompt", "Once upon a time " + std::to_string(i)},
                {"max_tokens", 8 + i},
                {"temperature", 0.8},
                {"seed", i},
                {"ignore_eos", true},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}}};
    results.push_back(std::async(std::launch::async, stream_completion, server.port(), req));
  }
  for (int i = 0; i < 32; ++i) {
    StreamResult r = results[static_cast<size_t>(i)].get();
    EXPECT_EQ(r.status, 200) << "request " << i << ": " << r.error;
    EXPECT_TRUE(r.done) << "request " << i;
    EXPECT_EQ(r.completion_tokens, 8 + i) << "request " << i;
    EXPECT_GE(r.text_chunks, 1) << "request " << i;
  }
  EXPECT_TRUE(wait_for_metrics(server.port(), pool_is_idle))
      << test::http_get(server.port(), "/metrics").body;
  auto m = test::server_metrics(server.port());
  EXPECT_EQ(m["ember_requests_total"], 32);
  EXPECT_EQ(m["ember_requests_finished_total"], 32);
  EXPECT_GE(m["ember_generation_tokens_total"], 32 * 8 + 31 * 32 / 2);
}

// serve with speculation (`proposer`: its flags): 32 concurrent greedy streams (some opting out
// with "speculative": false) give exactly the text plain `ember run` gives, the guesses show in
// /metrics, and every block comes back (the rejected guesses' included).
void expect_speculative_serve_keeps_greedy_outputs(const std::string& proposer) {
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " -t 2 --max-seqs 32 --draft-max 4 " + proposer);
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::vector<std::string> starts = {"Once upon a time", "Lily and Ben", "The dog",
                                           "One day, a little"};
  std::vector<std::future<StreamResult>> results;
  for (int i = 0; i < 32; ++i) {
    json req = {{"prompt", starts[static_cast<size_t>(i) % starts.size()]},
                {"max_tokens", 40 + (i % 4) * 10},
                {"temperature", 0},
                {"ignore_eos", true},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}}};
    if (i % 8 == 7) req["speculative"] = false;
    results.push_back(std::async(std::launch::async, stream_completion, server.port(), req));
  }
  std::map<std::string, std::string> expected;
  for (int i = 0; i < 32; ++i) {
    const std::string& p = starts[static_cast<size_t>(i) % starts.size()];
    const int n = 40 + (i % 4) * 10;
    const std::string key = p + "|" + std::to_string(n);
    if (expected.count(key) == 0)
      expected[key] = test::ember_run_greedy(stories_model(), p, n, true);
    StreamResult r = results[static_cast<size_t>(i)].get();
    EXPECT_EQ(r.status, 200) << "request " << i << ": " << r.error;
    EXPECT_EQ(r.completion_tokens, n) << "request " << i;
    EXPECT_EQ(r.text, expected[key]) << "request " << i;
  }
  EXPECT_TRUE(wait_for_metrics(server.port(), pool_is_idle))
      << test::http_get(server.port(), "/metrics").body;
  auto m = test::server_metrics(server.port());
  EXPECT_GT(m["ember_spec_draft_tokens_total"], 0);
  EXPECT_GT(m["ember_spec_accepted_tokens_total"], 0);
  EXPECT_GT(m["ember_spec_mean_accepted_length"], 1.0);
  EXPECT_EQ(m.count("ember_spec_steps_without_guesses_total"), 1u);
}

TEST(ServerLoad, SpeculativeLookupUnderLoadKeepsGreedyOutputs) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  expect_speculative_serve_keeps_greedy_outputs("--lookup 3");
}

TEST(ServerLoad, SpeculativeDraftUnderLoadKeepsGreedyOutputs) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  expect_speculative_serve_keeps_greedy_outputs("--draft-dtype q8_0 --draft-layers 4");
}

TEST(ServerLoad, PrefixCacheHitsShowInUsageAndMetrics) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) + " -t 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  // ~400 token ids (BOS + a pattern of ordinary vocabulary entries), and a second prompt sharing
  // its first 300 tokens.
  std::vector<int> a = {1}, b;
  for (int i = 1; i < 400; ++i) a.push_back(100 + (i * 7) % 300);
  b.assign(a.begin(), a.begin() + 300);
  for (int i = 300; i < 390; ++i) b.push_back(50 + (i * 3) % 40);
  auto before = test::server_metrics(server.port());
  auto ask = [&](const std::vector<int>& ids) {
    auto r = test::post_json(server.port(), "/v1/completions",
                             {{"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["usage"];
  };
  json first = ask(a);
  EXPECT_EQ(first["prompt_tokens"], 400);
  EXPECT_EQ(first["prompt_tokens_details"]["cached_tokens"], 0);
  json same = ask(a);  // identical: every full block before the last token
  EXPECT_EQ(same["prompt_tokens_details"]["cached_tokens"], (399 / 16) * 16);
  json shared = ask(b);  // the 300 shared tokens: 18 full blocks
  EXPECT_EQ(shared["prompt_tokens_details"]["cached_tokens"], (300 / 16) * 16);
  auto after = test::server_metrics(server.port());
  double hits =
      after["ember_prefix_cache_hit_blocks_total"] - before["ember_prefix_cache_hit_blocks_total"];
  EXPECT_EQ(hits, (399 / 16) + (300 / 16));
  EXPECT_GT(after["ember_prefix_cache_hit_rate"], 0.0);
}

TEST(ServerLoad, PreemptionWithATinyKvPoolKeepsGreedyOutputs) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  // 12 blocks of 16 = 192 tokens for 6 requests of ~70 tokens each: the scheduler must preempt.
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " -t 2 --kv-blocks 12 --max-seqs 8 --no-prefix-cache");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::vector<std::string> prompts = {"Once upon a time",  "Lily and Ben",  "The cat",
                                            "One day, a little", "Tom had a big", "The sun was"};
  std::vector<std::future<StreamResult>> results;
  for (const std::string& p : prompts) {
    json req = {{"prompt", p},      {"max_tokens", 60},
                {"temperature", 0}, {"ignore_eos", true},
                {"stream", true},   {"stream_options", {{"include_usage", true}}}};
    results.push_back(std::async(std::launch::async, stream_completion, server.port(), req));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    StreamResult r = results[i].get();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.completion_tokens, 60) << prompts[i];
    EXPECT_EQ(r.text, test::ember_run_greedy(stories_model(), prompts[i], 60, true)) << prompts[i];
  }
  auto m = test::server_metrics(server.port());
  EXPECT_GT(m["ember_preemptions_total"], 0) << "the pool was meant to be too small";
  EXPECT_TRUE(wait_for_metrics(server.port(), pool_is_idle));
}

// Opens a raw connection, starts a long stream, reads until the first event, and closes.
void disconnect_mid_stream(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string body = json({{"prompt", "Once upon a time"},
                           {"max_tokens", 2000},
                           {"ignore_eos", true},
                           {"stream", true}})
                         .dump();
  std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[512];
  while (got.find("data: ") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("data: "), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerLoad, ClientDisconnectCancelsAndFreesBlocks) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  // One thread and small steps keep the 2000-token request running long after the client left
  // (490 tokens could finish before the server's next write noticed, on a fast AVX-512 machine).
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " -t 1 --max-batched-tokens 16");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  auto before = test::server_metrics(server.port());
  disconnect_mid_stream(server.port());
  EXPECT_TRUE(wait_for_metrics(server.port(), [&](auto& m) {
    return m["ember_requests_cancelled_total"] == before["ember_requests_cancelled_total"] + 1 &&
           pool_is_idle(m);
  })) << test::http_get(server.port(), "/metrics").body;
  auto m = test::server_metrics(server.port());
  EXPECT_LT(m["ember_generation_tokens_total"], 2000) << "the request should have stopped early";
  // The server still serves.
  auto ok = test::post_json(server.port(), "/v1/completions", {{"prompt", "a"}, {"max_tokens", 3}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST(ServerLoad, SigtermFinishesInFlightStreamsAndExitsZero) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " -t 1 --max-batched-tokens 16");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  json req = {{"prompt", "Once upon a time"},
              {"max_tokens", 300},
              {"ignore_eos", true},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
  auto in_flight = std::async(std::launch::async, stream_completion, server.port(), req);
  // Wait until the request is running, then ask the server to stop.
  EXPECT_TRUE(
      wait_for_metrics(server.port(), [](auto& m) { return m["ember_requests_total"] >= 1; }));
  int code = server.stop(SIGTERM);
  EXPECT_EQ(code, 0) << server.log();
  StreamResult r = in_flight.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done) << "the in-flight stream is finished, not cut";
  EXPECT_EQ(r.completion_tokens, 300);
}

TEST(ServerLoad, SigintWhenIdleExitsZeroAndRefusesNewWork) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  EXPECT_EQ(test::http_get(server.port(), "/health").status, 200);
  EXPECT_EQ(server.stop(SIGINT), 0) << server.log();
  EXPECT_EQ(test::http_get(server.port(), "/health").status, 0) << "nothing listens any more";
}

}  // namespace
}  // namespace ember
