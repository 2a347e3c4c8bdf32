// `ember serve` against clients that would hold it (#26): slow headers, more connections than it
// serves, endless headers, and a client that leaves a non-streaming request. stories260K.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string stories_model() {
  return test::fixture("models/stories260K/stories260K.gguf").string();
}

bool send_all(int fd, const std::string& data) {
  return ::send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
}

// Reads until the server closes the connection or `timeout` passes.
std::string read_until_closed(int fd, std::chrono::milliseconds timeout, bool* closed = nullptr) {
  std::string got;
  const auto end = Clock::now() + timeout;
  char buf[4096];
  if (closed) *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

std::string completion_request(const json& body, bool close = true) {
  const std::string b = body.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         std::string(close ? "Connection: close\r\n" : "") +
         "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
}

// One exchange on a fresh connection: the whole answer and how long it took.
std::pair<std::string, double> timed_exchange(int port, const std::string& request) {
  const auto start = Clock::now();
  const int fd = test::connect_loopback(port);
  if (fd < 0) return {"", -1};
  send_all(fd, request);
  std::string answer = read_until_closed(fd, 10s);
  ::close(fd);
  return {answer, std::chrono::duration<double>(Clock::now() - start).count()};
}

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

// 200 clients sending their headers a byte at a time held every worker thread before: /health
// and completions stopped answering. Now they answer at once, and each slow connection is cut
// when its header deadline passes.
TEST(ServerHardening, SlowHeaderConnectionsNeitherStarveTheServerNorStayOpen) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) + " --header-timeout 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  constexpr int kSlow = 200;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = test::connect_loopback(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    send_all(fd, "GET /health HTTP/1.1\r\nX-Slow: ");
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {  // one more header byte per connection every 200 ms
    while (!stop.load()) {
      for (int fd : slow) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(200ms);
    }
  });
  std::this_thread::sleep_for(300ms);
  const auto [health, health_seconds] = timed_exchange(server.port(), kHealth);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  EXPECT_LT(health_seconds, 1.0);
  const auto [completion, completion_seconds] = timed_exchange(
      server.port(),
      completion_request({{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}));
  EXPECT_EQ(completion.rfind("HTTP/1.1 200", 0), 0u) << completion;
  EXPECT_NE(completion.find("\"completion_tokens\":8"), std::string::npos) << completion;
  EXPECT_LT(completion_seconds, 2.0);  // 1 s in the issue; slack for sanitizer builds
  // Every slow connection is closed by the server soon after its 2 s header deadline.
  int cut = 0;
  for (int fd : slow) {
    bool closed = false;
    read_until_closed(fd, 4s, &closed);
    cut += closed ? 1 : 0;
  }
  stop = true;
  trickle.join();
  for (int fd : slow) ::close(fd);
  EXPECT_EQ(cut, kSlow);
  const auto m = test::server_metrics(server.port());
  EXPECT_EQ(m.at("ember_http_connections_cut_total"), kSlow);
}

TEST(ServerHardening, ConnectionsOverTheCapGet503WithRetryAfter) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " --max-seqs 2 --max-connections 4");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(test::connect_loopback(server.port()));
  std::this_thread::sleep_for(300ms);  // each is taken by a worker
  const auto [refused, seconds] = timed_exchange(server.port(), kHealth);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too_many_connections"), std::string::npos) << refused;
  EXPECT_LT(seconds, 1.0);
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(300ms);
  const auto [ok, ok_seconds] = timed_exchange(server.port(), kHealth);
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_GE(test::server_metrics(server.port()).at("ember_http_connections_refused_total"), 1);
  // The cap must leave room for the running requests.
  std::string out;
  const int rc = test::run_shell(test::shell_quote(test::ember_binary()) + " serve -m " +
                                     test::shell_quote(stories_model()) +
                                     " --max-seqs 8 --max-connections 8 2>&1",
                                 &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--max-connections must exceed --max-seqs"), std::string::npos) << out;
}

// Headers without end grew the process by ~186 MB on one connection; now the request is refused
// once its line and headers pass --max-header-bytes, and the connection is closed.
TEST(ServerHardening, EndlessHeadersAreRefusedAndTheConnectionClosed) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " --max-header-bytes 16KiB");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int fd = test::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  std::string request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 1000; ++i) request += "X-Filler-" + std::to_string(i) + ": 0123456789\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);  // ~30 KB; may be cut short
  bool closed = false;
  const std::string answer = read_until_closed(fd, 5s, &closed);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer.substr(0, 200);
  EXPECT_TRUE(closed);
  const auto [health, seconds] = timed_exchange(server.port(), kHealth);
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  EXPECT_EQ(test::server_metrics(server.port()).at("ember_http_connections_cut_total"), 1);
}

// A request with a foreign Origin carrying, as its body, a whole request without one (what a
// page of another site can send with fetch and text/plain): the outer one is refused, and the
// body is never parsed as the next request on the connection, which used to run it. And a CORS
// preflight (answered from its headers) with such a body: the connection is closed after it.
TEST(ServerHardening, ARefusedRequestsBodyIsNeverRunAsTheNextRequest) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) +
                             " -t 2 --cors-origin http://allowed.example");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::string inner = completion_request({{"prompt", "Once"}, {"max_tokens", 4}}, false);
  for (const std::string& framing : {"Content-Length: " + std::to_string(inner.size()) + "\r\n",
                                     std::string("Transfer-Encoding: chunked\r\n")}) {
    SCOPED_TRACE(framing);
    std::string body = inner;
    if (framing.rfind("Transfer", 0) == 0) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", inner.size());
      body = size + inner + "\r\n0\r\n\r\n";
    }
    const int fd = test::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    send_all(fd,
             "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
             "Content-Type: text/plain\r\n" +
                 framing + "\r\n" + body);
    const std::string answer = read_until_closed(fd, 1500ms);
    ::close(fd);
    EXPECT_EQ(answer.rfind("HTTP/1.1 403", 0), 0u) << answer.substr(0, 200);
    EXPECT_EQ(answer.find("HTTP/1.1", 1), std::string::npos) << "a second answer:\n" << answer;
  }
  const int fd = test::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd,
           "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           "Origin: http://allowed.example\r\nContent-Length: " +
               std::to_string(inner.size()) + "\r\n\r\n" + inner);
  bool closed = false;
  const std::string answer = read_until_closed(fd, 3s, &closed);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 204", 0), 0u) << answer.substr(0, 200);
  EXPECT_EQ(answer.find("HTTP/1.1", 1), std::string::npos) << "a second answer:\n" << answer;
  EXPECT_TRUE(closed);
  const auto metrics = test::server_metrics(server.port());
  EXPECT_EQ(metrics.at("ember_requests_total"), 0) << "a smuggled completion ran";
  EXPECT_EQ(metrics.at("ember_http_responses_total{code=\"403\"}"), 2);
}

// An idle keep-alive connection (its request answered, the client still there) held a SIGTERM'd
// server for the whole keep-alive idle time (10 s); now the wait for its next request sees the
// shutdown within 100 ms.
TEST(ServerHardening, AnIdleKeepAliveConnectionDoesNotHoldTheShutdown) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server("-m " + test::shell_quote(stories_model()) + " -t 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int fd = test::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  char buf[512];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);
  const auto start = Clock::now();
  EXPECT_EQ(server.stop(SIGTERM, 8s), 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  ::close(fd);
}

// SIGTERM drains for --drain-timeout, then cancels what still runs: the server exits 0 about
// then (a 10 s timeout once took 20 s), and the stream that was cut short is ended, not left open.
TEST(ServerHardening, DrainTimeoutCancelsWhatStillRunsAndExitsOnTime) {
  const auto model = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(model / "config.json");
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " --dummy -t 1 --max-seqs 2 --drain-timeout 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int fd = test::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, completion_request({{"prompt", "Once upon a time"},
                                   {"max_tokens", 2000},
                                   {"ignore_eos", true},
                                   {"stream", true}}));
  const auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline &&
         test::server_metrics(server.port())["ember_sequences_running"] < 1) {
    std::this_thread::sleep_for(10ms);
  }
  const auto start = Clock::now();
  EXPECT_EQ(server.stop(SIGTERM, 15s), 0) << server.log();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(seconds, 1.5);
  EXPECT_LT(seconds, 5.0);
  bool closed = false;
  const std::string answer = read_until_closed(fd, 5s, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer.substr(0, 200);
  EXPECT_NE(answer.find("data: "), std::string::npos);
  EXPECT_EQ(answer.find("\"finish_reason\":\"length\""), std::string::npos)
      << "2,000 tokens cannot have finished in the drain's 2 s on one thread";
}

// A client that leaves while its whole (non-streamed) answer is being generated cancels it: its
// KV blocks return and the engine stops generating for it.
// (The SmolLM2-shaped dummy on one thread: slow enough that the 2,000 tokens are far from done
// when the client leaves; stories260K would finish them in a fraction of a second.)
TEST(ServerHardening, NonStreamingClientDisconnectCancelsAndFreesBlocks) {
  const auto model = test::fixture("models/smollm2-135m-instruct");
  EMBER_REQUIRE_FIXTURE(model / "config.json");
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " --dummy -t 1 --max-seqs 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const auto before = test::server_metrics(server.port());
  const int fd = test::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, completion_request(
                   {{"prompt", "Once upon a time"}, {"max_tokens", 2000}, {"ignore_eos", true}},
                   /*close=*/false));
  // Wait until it is generating, then leave.
  const auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline &&
         test::server_metrics(server.port())["ember_sequences_running"] < 1) {
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(200ms);
  ::close(fd);
  bool cancelled = false;
  std::map<std::string, double> m;
  for (auto end = Clock::now() + 10s; Clock::now() < end && !cancelled;) {
    m = test::server_metrics(server.port());
    cancelled =
        m["ember_requests_cancelled_total"] == before.at("ember_requests_cancelled_total") + 1 &&
        m["ember_kv_blocks_used"] == 0 && m["ember_http_requests_in_flight"] == 0;
    if (!cancelled) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(cancelled) << test::http_get(server.port(), "/metrics").body;
  EXPECT_LT(m["ember_generation_tokens_total"], before.at("ember_generation_tokens_total") + 2000);
  EXPECT_EQ(m["ember_http_responses_total{code=\"499\"}"], 1);
}

// Resident memory of a process, in KiB (VmRSS).
int64_t rss_kib(pid_t pid) {
  const std::string status = test::read_text("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::stoll(status.substr(at + 6));
}

// The body of an HTTP answer (after the blank line), de-chunked well enough for JSON bodies.
std::string body_of(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

int status_of(const std::string& answer) {
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
}

// 1,000 requests from 64 clients, one in ten malformed, oversized or abusive and one in ten from a
// client that leaves mid-stream: no crash, no 5xx but admission control's 503, every valid request
// answered with the text it gets alone, every KV block back and memory back near where it was.
TEST(ServerHardening, MixedAbusiveLoadLeavesTheServerWhole) {
  EMBER_REQUIRE_FIXTURE(stories_model());
  test::ServerProcess server(
      "-m " + test::shell_quote(stories_model()) +
      " --max-body 64KiB --header-timeout 2 --max-seqs 16 --max-connections 100 "
      "--kv-blocks 512");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int port = server.port();
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily wanted",
                                            "One day, a boy",   "The sun was",    "Tom and Sue"};
  auto valid = [&](size_t i, bool stream) {
    return json{{"prompt", prompts[i % prompts.size()]},
                {"max_tokens", 24},
                {"temperature", 0},
                {"stream", stream}};
  };
  // What each prompt gets alone (the reference every answer under load must equal).
  std::vector<std::string> expected;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto [answer, seconds] = timed_exchange(port, completion_request(valid(i, false)));
    ASSERT_EQ(status_of(answer), 200) << answer;
    expected.push_back(json::parse(body_of(answer))["choices"][0]["text"].get<std::string>());
  }
  const std::vector<std::string> abusive = {
      completion_request(json{{"prompt", "x"}, {"max_tokens", INT64_MAX}}),  // 2^63 - 1
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: "
      "9\r\n\r\n{\"prompt\":",  // broken JSON
      completion_request(json{{"prompt", std::string(100000, 'a')}, {"max_tokens", 1}}),  // 413
      completion_request(json{{"prompt", "x"}, {"temperature", "hot"}}),
      completion_request(json{{"prompt", "x"}, {"n", 1000}}),
      completion_request(json{{"prompt", std::vector<int>{1, -5, 999999}}}),
      "GET /v1/nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      "BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(100000, 'h') + "\r\n\r\n",
  };
  constexpr int kClients = 64;
  std::atomic<int> next{0}, wrong{0}, server_errors{0}, refused{0}, correct{0};
  int kRequests = 0;
  std::mutex failures_mutex;
  std::string failures;
  auto note = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(failures_mutex);
    if (failures.size() < 4000) failures += what + "\n";
  };
  auto run_mix = [&](int requests) {
    kRequests = requests;
    next = 0;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&] {
        for (int k = next++; k < kRequests; k = next++) {
          if (k % 10 == 0) {  // abusive
            const auto [answer, seconds] = timed_exchange(port, abusive[(k / 10) % abusive.size()]);
            const int status = status_of(answer);
            if (status >= 500 && status != 503) {
              ++server_errors;
              note("abusive " + std::to_string(k) + ": " + answer.substr(0, 300));
            }
            continue;
          }
          if (k % 10 == 1) {  // leaves mid-stream
            const int fd = test::connect_loopback(port);
            send_all(fd, completion_request(json{{"prompt", "Once upon a time"},
                                                 {"max_tokens", 400},
                                                 {"ignore_eos", true},
                                                 {"stream", true}}));
            std::string got;
            char buf[512];
            while (got.find("data: ") == std::string::npos) {
              const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
              if (n <= 0) break;
              got.append(buf, static_cast<size_t>(n));
            }
            ::close(fd);
            continue;
          }
          const bool stream = k % 2 == 0;
          const auto [answer, seconds] = timed_exchange(port, completion_request(valid(k, stream)));
          const int status = status_of(answer);
          if (status == 503) {
            ++refused;
            continue;
          }
          if (status >= 500) ++server_errors;
          std::string text;
          if (stream) {
            for (const std::string& e : test::sse_events(body_of(answer))) {
              const json chunk = json::parse(e, nullptr, false);
              if (chunk.is_object() && !chunk["choices"].empty() &&
                  chunk["choices"][0].contains("text")) {
                text += chunk["choices"][0]["text"].get<std::string>();
              }
            }
          } else if (status == 200) {
            text = json::parse(body_of(answer))["choices"][0]["text"].get<std::string>();
          }
          if (status == 200 && text == expected[k % prompts.size()]) {
            ++correct;
          } else {
            ++wrong;
            note("valid " + std::to_string(k) + ": status " + std::to_string(status) + " text '" +
                 text + "'");
          }
        }
      });
    }
    for (auto& t : clients) t.join();
  };
  // A first round brings the server to its working size: the KV pool's pages touched (512
  // blocks, preempting under this load), the worker threads' stacks (100 connections), the
  // allocator's arenas. Memory is measured from there.
  run_mix(1000);
  const int64_t rss_before = rss_kib(server.pid());
  server_errors = wrong = refused = correct = 0;
  run_mix(1000);
  EXPECT_EQ(server_errors.load(), 0) << failures;
  EXPECT_EQ(wrong.load(), 0) << failures;
  EXPECT_EQ(correct.load() + refused.load(), 800);
  EXPECT_EQ(refused.load(), 0);  // 64 clients fit the default queue
  EXPECT_TRUE(server.alive());
  // Every block back, nothing running.
  std::map<std::string, double> m;
  bool idle = false;
  for (auto end = Clock::now() + 10s; Clock::now() < end && !idle;) {
    m = test::server_metrics(port);
    idle = m["ember_kv_blocks_used"] == 0 && m["ember_sequences_running"] == 0 &&
           m["ember_http_requests_in_flight"] == 0;
    if (!idle) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(idle) << test::http_get(port, "/metrics").body;
  const int64_t rss_after = rss_kib(server.pid());
#if !defined(__SANITIZE_ADDRESS__)  // ASan's quarantine keeps freed memory resident on purpose
  EXPECT_LE(rss_after, rss_before + rss_before / 10)
      << "resident memory " << rss_before << " KiB before the load, " << rss_after << " after";
#endif
  std::printf("[ mixed load ] %d valid answers correct, resident memory %lld -> %lld KiB\n",
              correct.load(), static_cast<long long>(rss_before),
              static_cast<long long>(rss_after));
}

}  // namespace
}  // namespace ember
