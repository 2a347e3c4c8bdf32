// The chat page `ember serve` serves at /: the page itself (without the API key, which it asks
// for), its controls, and its script run under node: it parses, and its server-sent-events reader
// reassembles events split across reads the way a fetch body delivers them. Then the page in
// headless Chromium (Debian's, driven by puppeteer-core): the key asked for once, a streamed
// greedy answer equal to `ember run`'s with its stats, and the stop button cancelling a long
// answer on the server; a screenshot goes to <build>/screenshots/chat_page.png.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <thread>

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
                             " -t 2 --api-key page-k3y --allow-trace");
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

const char* kBrowserScript = R"JS(
import puppeteer from 'puppeteer-core';
const [url, shot, chromium] = process.argv.slice(2);
const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
const out = { dialogs: 0 };
try {
  const page = await browser.newPage();
  page.on('dialog', async (d) => { out.dialogs++; out.dialog = d.message(); await d.accept('page-k3y'); });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('#model option', { timeout: 20000 });
  out.model = await page.$eval('#model', (e) => e.value);
  await page.$eval('#temperature', (e) => { e.value = '0'; });
  await page.$eval('#max_tokens', (e) => { e.value = '24'; });
  out.trace_offered = await page.$eval('#trace_label', (e) => !e.hidden);
  await page.click('#trace');
  await page.type('#prompt', 'Once upon a time');
  await page.click('#send');
  await page.waitForSelector('.msg.assistant .stats', { timeout: 30000 });
  out.reply = await page.$eval('.msg.assistant', (e) => e.firstChild.textContent);
  out.stats = await page.$eval('.msg.assistant .stats', (e) => e.textContent);
  out.trace_id = await page.$eval('.msg.assistant .trace-link', (e) => e.dataset.trace);
  await page.click('#trace');  // the long answer below is not traced
  await page.$eval('#max_tokens', (e) => { e.value = '1500'; });
  await page.$eval('#temperature', (e) => { e.value = '1'; });
  await page.type('#prompt', 'Tell me a long story');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[1]?.textContent.length > 20,
                             { timeout: 30000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant .stats').length === 2,
                             { timeout: 30000 });
  out.stopped = await page.$$eval('.msg.assistant .stats', (e) => e[1].textContent);
  out.send_enabled = await page.$eval('#send', (e) => !e.disabled);
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  out.error = String(e);
}
await browser.close();
console.log(JSON.stringify(out));
)JS";

TEST(ServerChatPage, ChatRoundTripAndStopInHeadlessChromium) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::HeadlessBrowser browser;
  if (std::string why = test::headless_browser(&browser); !why.empty()) GTEST_SKIP() << why;
  const auto dir = browser.node_dir, shots = browser.screenshots;
  const std::string chromium = browser.chromium;
  std::ofstream(dir / "chat_page.mjs") << kBrowserScript;

  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                             " -t 2 --api-key page-k3y --allow-trace");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  std::string out;
  int rc = test::run_shell("cd " + test::shell_quote(dir.string()) +
                               " && timeout 120 node chat_page.mjs " + server.base_url() + "/ " +
                               test::shell_quote((shots / "chat_page.png").string()) + " " +
                               chromium + " 2>&1",
                           &out);
  ASSERT_EQ(rc, 0) << out;
  const auto r = nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  ASSERT_FALSE(r.contains("error")) << out << "\nserver log:\n" << server.log();
  EXPECT_EQ(r["dialogs"], 1) << "the key is asked for once";
  EXPECT_EQ(r["model"], "stories260K");
  EXPECT_EQ(r["reply"], test::ember_run_greedy(model.string(), "Once upon a time", 24));
  const std::string stats = r["stats"];
  EXPECT_NE(stats.find("TTFT"), std::string::npos) << stats;
  EXPECT_NE(stats.find("tok/s"), std::string::npos) << stats;
  EXPECT_NE(stats.find("5 prompt tokens, 24 generated"), std::string::npos) << stats;
  EXPECT_NE(r["stopped"].get<std::string>().find("stopped"), std::string::npos) << out;
  EXPECT_TRUE(r["send_enabled"].get<bool>());
  EXPECT_TRUE(std::filesystem::exists(shots / "chat_page.png"));
  // "Trace answers" (offered: --allow-trace) put a link under the first answer; its page is the
  // trace of that answer.
  EXPECT_TRUE(r["trace_offered"].get<bool>()) << out;
  ASSERT_TRUE(r["trace_id"].is_string()) << out;
  httplib::Client c("127.0.0.1", server.port());
  auto trace =
      c.Get("/trace/" + r["trace_id"].get<std::string>(), {{"Authorization", "Bearer page-k3y"}});
  ASSERT_TRUE(trace);
  EXPECT_EQ(trace->status, 200);
  EXPECT_NE(trace->body.find("\"ember_trace\":1"), std::string::npos);
  // The stopped answer was cancelled on the server, not left running.
  bool cancelled = false;
  for (int i = 0; i < 100 && !cancelled; ++i) {
    httplib::Client c("127.0.0.1", server.port());
    auto m = c.Get("/metrics", {{"Authorization", "Bearer page-k3y"}});
    cancelled = m && m->body.find("ember_requests_cancelled_total 1") != std::string::npos;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(cancelled) << "the stop button cancels the request on the server";
}

}  // namespace
}  // namespace ember
