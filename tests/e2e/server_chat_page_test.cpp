// The chat page `ember serve` serves at /: the page itself (without the API key, which it asks
// for), its controls, and its script run under node: it parses, and its server-sent-events reader
// reassembles events split across reads the way a fetch body delivers them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

const char* kScriptCheck = R"JS(
const fs = require('fs');
const vm = require('vm');
vm.runInThisContext(fs.readFileSync(process.argv[2], 'utf8'));
const { parseSSE } = globalThis.emberChat;
const stream = 'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n';
let events = [], rest = '';
for (let i = 0; i < stream.length; i += 7) {  // arbitrary read boundaries
  const r = parseSSE(rest + stream.slice(i, i + 7));
  events = events.concat(r.events);
  rest = r.rest;
}
console.log(JSON.stringify({ events, rest }));
)JS";

TEST(ServerChatPage, ServedWithItsControlsAndAWorkingStreamReader) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " -t 2 --api-key page-k3y");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200) << "the page is served without the key";
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"),
            std::string::npos);
  const std::string& html = page->body;
  for (const char* part : {"<title>ember</title>", "id=\"model\"", "id=\"system\"",
                           "id=\"temperature\"", "id=\"send\"", "id=\"stop\"", "stream_options",
                           "/v1/chat/completions", "Authorization", "TTFT", "tok/s"}) {
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
  EXPECT_EQ(html.find("http://"), std::string::npos) << "no CDN or other site";
  EXPECT_EQ(client.Get("/v1/models")->status, 401) << "the API still wants the key";

  std::string out;
  if (test::run_shell("node --version 2>/dev/null", &out) != 0)
    GTEST_SKIP() << "node is not installed";
  const size_t begin = html.find("<script>") + 8, end = html.find("</script>");
  ASSERT_LT(begin, end);
  const auto dir = test::scratch_dir("chat-page");
  std::ofstream(dir / "page.js") << html.substr(begin, end - begin);
  std::ofstream(dir / "check.js") << kScriptCheck;
  ASSERT_EQ(test::run_shell("node " + test::shell_quote((dir / "check.js").string()) + " " +
                                test::shell_quote((dir / "page.js").string()) + " 2>&1",
                            &out),
            0)
      << out;
  const auto r = nlohmann::json::parse(out);
  EXPECT_EQ(r["events"], nlohmann::json({"{\"a\":1}", "{\"b\":2}", "[DONE]"})) << out;
  EXPECT_EQ(r["rest"], "");
}

}  // namespace
}  // namespace ember
