// `ember serve --ssl-cert/--ssl-key`: HTTPS with a certificate made here by the openssl CLI;
// plain HTTP to the TLS port gets nothing; a key that does not match is one startup error.
#include <gtest/gtest.h>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

TEST(ServerTls, ServesHttpsWithTheGivenCertificate) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("tls");
  std::string out;
  auto make_cert = [&](const std::string& name) {
    return test::run_shell(
        "cd " + test::shell_quote(dir.string()) +
            " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost"
            " -addext subjectAltName=IP:127.0.0.1 -keyout " +
            name + "-key.pem -out " + name + "-cert.pem 2>&1",
        &out);
  };
  if (make_cert("a") != 0) GTEST_SKIP() << "the openssl CLI could not make a certificate: " << out;
  ASSERT_EQ(make_cert("b"), 0) << out;
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

}  // namespace
}  // namespace ember
