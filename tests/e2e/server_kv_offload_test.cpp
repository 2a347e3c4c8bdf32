// `ember serve --kv-offload-dir`: the disk tier survives a restart (SIGTERM spills the cached
// prefix blocks to disk; the next server answers the same prompt with them cached), a corrupted
// entry is skipped and counted while the request still succeeds, and a bad flag is one error.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kPrompt =
    "Once upon a time there was a little girl named Lily who loved to play in the park with her "
    "friends every day";  // 33 tokens with BOS: two full blocks of 16

// usage.prompt_tokens_details.cached_tokens of a greedy 5-token completion, and its text.
std::pair<int64_t, std::string> complete(int port) {
  test::HttpResult r = test::post_json(
      port, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("usage")) return {-1, ""};
  return {j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
          j["choices"][0]["text"].get<std::string>()};
}

TEST(ServerKvOffload, DiskTierSurvivesARestartAndSkipsACorruptEntry) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const fs::path dir = test::scratch_dir("server-kv-offload") / "tier";
  const std::string args =
      "-m " + test::shell_quote(model.string()) + " -t 2 --kv-offload-dir " + dir.string();
  std::string first_text;
  {
    test::ServerProcess server(args);
    ASSERT_TRUE(server.ready()) << server.startup_error();
    const auto [cached, text] = complete(server.port());
    EXPECT_EQ(cached, 0);
    first_text = text;
    EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 2u);
  {
    test::ServerProcess server(args);
    ASSERT_TRUE(server.ready()) << server.startup_error();
    EXPECT_NE(server.log().find("2 blocks found"), std::string::npos) << server.log();
    const auto [cached, text] = complete(server.port());
    EXPECT_EQ(cached, 32);
    EXPECT_EQ(text, first_text);
    auto m = test::server_metrics(server.port());
    EXPECT_EQ(m["ember_kv_offload_disk_hits_total"], 2);
    EXPECT_EQ(m["ember_prefix_cache_restored_blocks_total"], 2);
    server.stop(SIGKILL);  // nothing new is written: the files stay as they are
  }
  // Corrupt both entries' payloads: the next server uses neither, counts them, and answers.
  for (const fs::path& f : files) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(200);
    io.put('\x7f');
    io.seekp(300);
    io.put('\x01');
  }
  {
    test::ServerProcess server(args);
    ASSERT_TRUE(server.ready()) << server.startup_error();
    const auto [cached, text] = complete(server.port());
    EXPECT_EQ(cached, 0);
    EXPECT_EQ(text, first_text);
    auto m = test::server_metrics(server.port());
    EXPECT_GE(m["ember_kv_offload_disk_rejected_total"], 1);  // the chain stops at the first
    EXPECT_EQ(m["ember_kv_offload_disk_hits_total"], 0);
    server.stop(SIGKILL);
  }
  test::ServerProcess bad(args + " --kv-offload-disk lots");
  EXPECT_FALSE(bad.ready());
  EXPECT_NE(bad.startup_error().find("lots"), std::string::npos) << bad.startup_error();
}

// A disk whose writes fail: under a file-size limit of 8 KiB (prlimit) every block file (~12 KiB
// for stories260K) is refused by the kernel mid-write with EFBIG, the path a full disk's ENOSPC
// takes. A pool of 8 blocks makes the cache spill while serving: one warning, the tier off and
// counted, no file left behind, and every request still answered with its greedy text.
TEST(ServerKvOffload, AFailingDiskTurnsTheTierOffAndRequestsGoOn) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) GTEST_SKIP() << "no prlimit";
  const fs::path dir = test::scratch_dir("server-kv-offload-full") / "tier";
  test::ServerProcess server("-m " + test::shell_quote(model.string()) +
                                 " -t 2 --kv-blocks 8 --kv-offload-dir " + dir.string(),
                             "prlimit --fsize=8192");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  for (int i = 0; i < 6; ++i) {
    // Distinct 33-token prompts: each leaves two full blocks in the prefix cache, evicted (and
    // spilled) by the next ones.
    const std::string prompt = std::to_string(i) + " " + kPrompt;
    test::HttpResult r =
        test::post_json(server.port(), "/v1/completions",
                        json{{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"],
              test::ember_run_greedy(model.string(), prompt, 5));
  }
  auto m = test::server_metrics(server.port());
  EXPECT_GE(m["ember_kv_offload_disk_write_failures_total"], 1);
  EXPECT_EQ(m["ember_kv_offload_disk_enabled"], 0);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
  const std::string log = server.log();
  EXPECT_NE(log.find("turned off (write failed"), std::string::npos) << log;
  EXPECT_EQ(log.find("turned off", log.find("turned off") + 1), std::string::npos)
      << "warned once: " << log;
  int left = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++left;
    ADD_FAILURE() << "left behind: " << e.path();
  }
  EXPECT_EQ(left, 0);
}

}  // namespace
}  // namespace ember
