// A page of another site posting to `ember serve` on loopback, in headless Chromium (Debian's,
// driven by puppeteer-core): the page comes from http://evil.example:PORT (Chromium resolves the
// name to 127.0.0.1, so the browser's own private-network rules do not stand between them) and
// fetch()es a completion with `Content-Type: text/plain`, the "simple" request a browser sends
// without a preflight, in cors and no-cors modes. The server must refuse both with 403 before
// anything runs. The control: the same page against a server started with `--cors-origin '*'`
// gets its completion, so the browser did deliver the requests and the refusal is the server's.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

const char* kCrossOriginScript = R"JS(
import http from 'node:http';
import puppeteer from 'puppeteer-core';
const [ember, chromium] = process.argv.slice(2);
const page = `<!doctype html><title>another site</title><script>
window.results = (async () => {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  const post = { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body };
  const out = {};
  try {
    const r = await fetch('${ember}/v1/completions', post);
    out.cors = { status: r.status, text: await r.text() };
  } catch (e) { out.cors = { error: String(e) }; }
  try {
    const r = await fetch('${ember}/v1/completions', { ...post, mode: 'no-cors' });
    out.no_cors = { type: r.type };
  } catch (e) { out.no_cors = { error: String(e) }; }
  return out;
})();
</script>`;
const site = http.createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/html' });
  res.end(page);
});
await new Promise((ok) => site.listen(0, '127.0.0.1', ok));
const origin = `http://evil.example:${site.address().port}`;
const out = { origin };
const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
         '--host-resolver-rules=MAP evil.example 127.0.0.1'] });
try {
  const tab = await browser.newPage();
  await tab.goto(origin + '/', { waitUntil: 'load' });
  Object.assign(out, await tab.evaluate(() => window.results));
} catch (e) {
  out.error = String(e);
}
await browser.close();
site.close();
console.log(JSON.stringify(out));
)JS";

// The server's metrics once `metric` reaches `value` (responses are counted after they are sent,
// so a page may see its answer a moment before the counter moves), or after 5 s.
std::map<std::string, double> metrics_when(int port, const std::string& metric, double value) {
  auto metrics = test::server_metrics(port);
  for (int i = 0; i < 100 && metrics[metric] < value; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = test::server_metrics(port);
  }
  return metrics;
}

// Runs the page against `server`; the script's JSON result.
nlohmann::json run_page(const test::HeadlessBrowser& browser, const test::ServerProcess& server) {
  std::string out;
  const int rc = test::run_shell("cd " + test::shell_quote(browser.node_dir.string()) +
                                     " && timeout 120 node cross_origin_page.mjs " +
                                     server.base_url() + " " + browser.chromium + " 2>&1",
                                 &out);
  EXPECT_EQ(rc, 0) << out;
  const size_t brace = out.rfind("{\"origin\"");
  if (brace == std::string::npos) return nlohmann::json{{"error", out}};
  return nlohmann::json::parse(out.substr(brace), nullptr, false);
}

TEST(ServerCrossOriginPage, APostFromAnotherSiteIsRefusedAndRunsNothing) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::HeadlessBrowser browser;
  if (std::string why = test::headless_browser(&browser); !why.empty()) GTEST_SKIP() << why;
  std::ofstream(browser.node_dir / "cross_origin_page.mjs") << kCrossOriginScript;
  const std::string args = "-m " + test::shell_quote(model.string()) + " -t 2";

  test::ServerProcess guarded(args);
  ASSERT_TRUE(guarded.ready()) << guarded.startup_error();
  const nlohmann::json refused = run_page(browser, guarded);
  ASSERT_FALSE(refused.contains("error")) << refused.dump();
  // The page learns nothing: no Access-Control-Allow-Origin on the 403, so its cors fetch fails;
  // the no-cors one gets an opaque response.
  EXPECT_TRUE(refused["cors"].contains("error")) << refused.dump();
  EXPECT_EQ(refused["no_cors"]["type"], "opaque") << refused.dump();
  auto metrics = metrics_when(guarded.port(), "ember_http_responses_total{code=\"403\"}", 2);
  EXPECT_EQ(metrics["ember_http_responses_total{code=\"403\"}"], 2) << "both posts arrived";
  EXPECT_EQ(metrics["ember_requests_total"], 0) << "nothing was admitted";
  EXPECT_EQ(metrics["ember_generation_tokens_total"], 0);

  test::ServerProcess open(args + " --cors-origin '*'");
  ASSERT_TRUE(open.ready()) << open.startup_error();
  const nlohmann::json allowed = run_page(browser, open);
  ASSERT_FALSE(allowed.contains("error")) << allowed.dump();
  ASSERT_EQ(allowed["cors"]["status"], 200) << allowed.dump();
  const auto completion =
      nlohmann::json::parse(allowed["cors"]["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(completion.is_object()) << allowed.dump();
  EXPECT_EQ(completion["choices"][0]["text"],
            test::ember_run_greedy(model.string(), "Once upon a time", 8));
  metrics = metrics_when(open.port(), "ember_requests_total", 2);
  EXPECT_EQ(metrics["ember_http_responses_total{code=\"403\"}"], 0);
  EXPECT_EQ(metrics["ember_requests_total"], 2) << "the control server ran both posts";
}

}  // namespace
}  // namespace ember
