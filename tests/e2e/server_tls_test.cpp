// `ember serve --ssl-cert/--ssl-key`: HTTPS with a certificate made here by the openssl CLI;
// plain HTTP to the TLS port gets nothing; a key that does not match is one startup error. TLS
// connections keep the plain ones' bounds: a handshake or headers that do not come in time cut
// the connection, and connections over the cap are closed at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A certificate and key made by the openssl CLI in `dir` as NAME-cert.pem / NAME-key.pem; false
// (with the CLI's output in `out`) when it could not.
bool make_cert(const std::filesystem::path& dir, const std::string& name, std::string* out) {
  return test::run_shell(
             "cd " + test::shell_quote(dir.string()) +
                 " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost"
                 " -addext subjectAltName=IP:127.0.0.1 -keyout " +
                 name + "-key.pem -out " + name + "-cert.pem 2>&1",
             out) == 0;
}

TEST(ServerTls, ServesHttpsWithTheGivenCertificate) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("tls");
  std::string out;
  if (!make_cert(dir, "a", &out))
    GTEST_SKIP() << "the openssl CLI could not make a certificate: " << out;
  ASSERT_TRUE(make_cert(dir, "b", &out)) << out;
  const std::string cert = (dir / "a-cert.pem").string(), key = (dir / "a-key.pem").string();
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --ssl-cert " +
                             test::shell_quote(cert) + " --ssl-key " + test::shell_quote(key));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port());
  ASSERT_EQ(
      test::run_shell("curl -s --cacert " + test::shell_quote(cert) + " " + url + "/health", &out),
      0)
      << out;
  ASSERT_EQ(test::run_shell("curl -s --cacert " + test::shell_quote(cert) +
                                " -H 'Content-Type: application/json' -d '{\"prompt\": \"Once\", "
                                "\"max_tokens\": 4}' " +
                                url + "/v1/completions",
                            &out),
            0)
      << out;
  json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["usage"]["completion_tokens"], 4) << out;
  // Plain HTTP on the TLS port is not served.
  const std::string plain = "http://127.0.0.1:" + std::to_string(server.port()) + "/health";
  EXPECT_NE(test::run_shell("curl -s -f --max-time 5 " + plain, &out), 0) << out;
  // A certificate the client does not trust is refused by the client (the server is not a CA).
  EXPECT_NE(test::run_shell("curl -s --cacert " + test::shell_quote((dir / "b-cert.pem").string()) +
                                " " + url + "/health",
                            &out),
            0);

  test::ServerProcess mismatched("-m " + test::shell_quote(model.string()) + " --ssl-cert " +
                                 test::shell_quote(cert) + " --ssl-key " +
                                 test::shell_quote((dir / "b-key.pem").string()));
  EXPECT_FALSE(mismatched.ready());
  EXPECT_NE(mismatched.log().find("cannot load the TLS certificate"), std::string::npos)
      << mismatched.log();
  test::ServerProcess half("-m " + test::shell_quote(model.string()) + " --ssl-cert " +
                           test::shell_quote(cert));
  EXPECT_FALSE(half.ready());
  EXPECT_NE(half.log().find("both --ssl-cert and --ssl-key"), std::string::npos) << half.log();
}

// Seconds until the server closes a TLS connection that completed its handshake and then sent
// `head` (an unfinished request) and nothing more; -1 when the handshake failed.
double seconds_until_closed_after(int port, const std::string& head) {
  const int fd = test::connect_loopback(port);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  double seconds = -1;
  if (fd >= 0 && SSL_connect(ssl) == 1) {
    SSL_write(ssl, head.data(), static_cast<int>(head.size()));
    const auto start = Clock::now();
    char buf[256];
    while (SSL_read(ssl, buf, sizeof buf) > 0) {
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  if (fd >= 0) ::close(fd);
  return seconds;
}

TEST(ServerTls, ConnectionsKeepTheDeadlinesAndTheCap) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("tls-bounds");
  std::string out;
  if (!make_cert(dir, "c", &out))
    GTEST_SKIP() << "the openssl CLI could not make a certificate: " << out;
  const std::string cert = (dir / "c-cert.pem").string();
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " -t 2 --max-seqs 2 --max-connections 3 --header-timeout 2"
                             " --ssl-cert " +
                             test::shell_quote(cert) + " --ssl-key " +
                             test::shell_quote((dir / "c-key.pem").string()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::string health = "curl -s -f --max-time 5 --cacert " + test::shell_quote(cert) +
                             " https://127.0.0.1:" + std::to_string(server.port()) + "/health";
  // Headers a byte short of their end: cut at the header deadline, not held.
  const double cut_after =
      seconds_until_closed_after(server.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  EXPECT_GE(cut_after, 1.0);
  EXPECT_LT(cut_after, 5.0);
  // Three connections that never start their handshake fill the cap: a fourth is closed at
  // once; once the handshake deadline has cut them, the server answers again.
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(test::connect_loopback(server.port()));
  // The server takes the three in when it gets to them (on a starved machine that took longer
  // than a fixed wait once): ask until a request is refused, well within their 2 s deadline.
  const auto connected = Clock::now();
  bool refused = false;
  while (!refused && Clock::now() - connected < std::chrono::milliseconds(1500)) {
    refused = test::run_shell(health, &out) != 0;
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(refused) << "never over the cap: " << out;
  std::this_thread::sleep_until(connected + std::chrono::milliseconds(2800));
  EXPECT_EQ(test::run_shell(health, &out), 0) << out;
  for (int fd : idle) ::close(fd);
  const auto metrics = test::parse_metrics([&] {
    std::string text;
    test::run_shell("curl -s --cacert " + test::shell_quote(cert) +
                        " https://127.0.0.1:" + std::to_string(server.port()) + "/metrics",
                    &text);
    return text;
  }());
  EXPECT_GE(metrics.at("ember_http_connections_cut_total"), 4);
  EXPECT_GE(metrics.at("ember_http_connections_refused_total"), 1);
  // Streaming over TLS: every event arrives, then [DONE].
  ASSERT_EQ(test::run_shell("curl -s -N --cacert " + test::shell_quote(cert) +
                                " -H 'Content-Type: application/json' -d '{\"prompt\": \"Once\", "
                                "\"max_tokens\": 6, \"stream\": true}' https://127.0.0.1:" +
                                std::to_string(server.port()) + "/v1/completions",
                            &out),
            0)
      << out;
  const auto events = test::sse_events(out);
  ASSERT_FALSE(events.empty()) << out;
  EXPECT_EQ(events.back(), "[DONE]") << out;
}

}  // namespace
}  // namespace ember
