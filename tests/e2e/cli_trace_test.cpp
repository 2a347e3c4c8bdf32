// `ember trace` end to end: the page and the JSON it writes for stories260K, what it refuses, and
// the page in headless Chromium (Debian's, driven by puppeteer-core): a heat map per layer and
// head, a logit-lens cell per layer and position, the residual, KV and roofline tables, with the
// numbers the JSON holds; a screenshot goes to <build>/screenshots/trace_page.png.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using test::read_text;

TEST(CliTrace, WritesThePageAndTheJsonOfOneGreedyRun) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("cli-trace");
  const auto html = dir / "trace.html", json = dir / "trace.json";
  const auto r = test::run_ember("trace -m " + test::shell_quote(model.string()) +
                                 " -p 'Once upon a time' -n 6 --no-probe -o " +
                                 test::shell_quote(html.string()) + " --json " +
                                 test::shell_quote(json.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  EXPECT_EQ(j["ember_trace"], 1);
  EXPECT_EQ(j["n_prompt"], 5);
  ASSERT_EQ(j["tokens"].size(), 11u);
  // The generated text is greedy decoding's, as ember run --temp 0 gives it.
  std::string text;
  for (size_t i = 5; i < j["tokens"].size(); ++i) text += j["tokens"][i]["text"].get<std::string>();
  EXPECT_EQ(text, test::ember_run_greedy(model.string(), "Once upon a time", 6));
  EXPECT_EQ(j["logit_lens"]["layers"].size(), j["model"]["n_layers"].get<size_t>() + 1);
  EXPECT_EQ(j["attention"]["layers"].size(), j["model"]["n_layers"].get<size_t>());
  EXPECT_EQ(j["roofline"]["steps"].size(), 6u);
  EXPECT_TRUE(j["roofline"]["phases"].contains("prefill"));
  EXPECT_TRUE(j["roofline"]["phases"].contains("decode"));
  // The page holds the same data, inline, with nothing left to fetch.
  const std::string page = read_text(html);
  EXPECT_EQ(page.find("/*EMBER_TRACE_DATA*/"), std::string::npos);
  EXPECT_NE(page.find("\"ember_trace\":1"), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);  // no script, image or frame to load
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("@import"), std::string::npos);
}

TEST(CliTrace, RefusesWhatItDoesNotTrace) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "trace -m " + test::shell_quote(model.string()) + " -p Hi -n 2 --no-probe ";
  auto r = test::run_ember(m + "--lookup 2 -o /dev/null");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("speculative decoding"), std::string::npos) << r.err;
  r = test::run_ember(m + "-o ''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nothing to write"), std::string::npos) << r.err;
  r = test::run_ember(m + "--max-keys 0 -o /dev/null");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--max-keys"), std::string::npos) << r.err;
  r = test::run_ember(m + "-o /nonexistent-dir/t.html");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent-dir/t.html"), std::string::npos) << r.err;
}

const char* kTracePageScript = R"JS(
import puppeteer from 'puppeteer-core';
const [url, shot, chromium] = process.argv.slice(2);
const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
const out = {};
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => { out.page_error = String(e); });
  page.on('request', (r) => { if (!r.url().startsWith('file:')) out.network = r.url(); });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => document.body.dataset.ready === '1', { timeout: 20000 });
  out.heatmaps = await page.$$eval('canvas.heatmap', (cs) => cs.map((c) => [Number(c.dataset.layer), Number(c.dataset.head), c.height]));
  // A heat map's darkest pixel of its last row: the key with the most weight.
  out.painted = await page.$$eval('canvas.heatmap', (cs) => cs.filter((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 250) return true;
    return false;
  }).length);
  out.lens_cells = await page.$$eval('#lens-table td', (tds) => tds.length);
  out.lens_titles = await page.$$eval('#lens-table td', (tds) => tds.filter((t) => t.title.includes('next:')).length);
  out.residual_rows = await page.$$eval('#residual-table tr', (r) => r.length);
  out.kv_rows = await page.$$eval('#kv-table tr', (r) => r.length);
  out.roofline_rows = await page.$$eval('#roofline-table tr', (r) => r.length);
  out.points = await page.$$eval('#roofline-chart circle.op-point', (c) => c.length);
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  out.error = String(e);
}
await browser.close();
console.log(JSON.stringify(out));
)JS";

TEST(CliTrace, PageDrawsEveryLayerAndHeadInHeadlessChromium) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::HeadlessBrowser browser;
  if (std::string why = test::headless_browser(&browser); !why.empty()) GTEST_SKIP() << why;
  const auto node_dir = browser.node_dir, shots = browser.screenshots;
  const std::string chromium = browser.chromium;
  std::ofstream(node_dir / "trace_page.mjs") << kTracePageScript;
  const auto dir = test::scratch_dir("cli-trace-page");
  const auto html = dir / "trace.html", json = dir / "trace.json";
  const auto r = test::run_ember(
      "trace -m " + test::shell_quote(model.string()) + " -p 'Once upon a time' -n 4 -o " +
      test::shell_quote(html.string()) + " --json " + test::shell_quote(json.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  std::string out;
  const int rc = test::run_shell(
      "cd " + test::shell_quote(node_dir.string()) + " && timeout 120 node trace_page.mjs " +
          test::shell_quote("file://" + html.string()) + " " +
          test::shell_quote((shots / "trace_page.png").string()) + " " + chromium + " 2>&1",
      &out);
  ASSERT_EQ(rc, 0) << out;
  const auto p = nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
  ASSERT_TRUE(p.is_object()) << out;
  ASSERT_FALSE(p.contains("error")) << out;
  EXPECT_FALSE(p.contains("page_error")) << out;
  EXPECT_FALSE(p.contains("network")) << "the page fetched something: " << out;
  const int64_t L = j["model"]["n_layers"], H = j["model"]["n_heads"];
  ASSERT_EQ(p["heatmaps"].size(), static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const auto& m = p["heatmaps"][static_cast<size_t>(l * H + h)];
      EXPECT_EQ(m[0], l);
      EXPECT_EQ(m[1], h);
      // One row per recorded query position.
      EXPECT_EQ(
          m[2],
          j["attention"]["layers"][static_cast<size_t>(l)]["heads"][static_cast<size_t>(h)]["rows"]
              .size());
    }
  }
  EXPECT_EQ(p["painted"], L * H);
  // Positions that ran (prompt + 3 decoded) x (layers + the embedding).
  const int64_t positions = j["logit_lens"]["layers"][0]["cells"].size();
  EXPECT_EQ(positions, 5 + 3);
  EXPECT_EQ(p["lens_cells"], positions * (L + 1));
  EXPECT_EQ(p["lens_titles"], positions * (L + 1));
  EXPECT_EQ(p["residual_rows"], L + 2);  // header, embedding, each layer
  EXPECT_EQ(p["kv_rows"], 1 + 4);        // header, 4 steps
  EXPECT_GE(p["roofline_rows"].get<int64_t>(), 1 + 2 + 8);
  EXPECT_GT(p["points"].get<int64_t>(), 0);
  EXPECT_TRUE(std::filesystem::exists(shots / "trace_page.png"));
}

}  // namespace
}  // namespace ember
