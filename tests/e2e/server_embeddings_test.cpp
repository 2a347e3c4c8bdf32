// POST /v1/embeddings on stories260K: unit-length vectors of the model's width, the same input
// gives the same vector whether alone, batched or sent as token ids, base64 carries the same
// floats, pooling changes them, and bad fields are 400s naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "e2e/server_test_util.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

std::vector<float> from_base64(const std::string& s) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    buf = (buf << 6) | static_cast<uint32_t>(alphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>((buf >> bits) & 0xFF));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST(ServerEmbeddings, VectorsArePooledHiddenStates) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --model-name tiny");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const int port = server.port();
  auto embed = [&](const json& body) {
    auto r = test::post_json(port, "/v1/embeddings", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  };
  json one = embed({{"input", "Once upon a time"}, {"model", "tiny"}});
  EXPECT_EQ(one["object"], "list");
  EXPECT_EQ(one["model"], "tiny");
  const std::vector<float> a = one["data"][0]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(a.size(), 64u);  // stories260K's d_model
  double norm = 0;
  for (float x : a) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_GT(one["usage"]["prompt_tokens"].get<int>(), 3);

  json batch = embed({{"input", {"Lily and Ben", "Once upon a time"}}});
  ASSERT_EQ(batch["data"].size(), 2u);
  EXPECT_EQ(batch["data"][1]["index"], 1);
  const auto b = batch["data"][1]["embedding"].get<std::vector<float>>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;

  // Token ids as /tokenize gives them (BOS included, as the string input gets it).
  json ids = json::parse(
      test::post_json(port, "/tokenize", {{"content", "Once upon a time"}, {"add_special", true}})
          .body)["tokens"];
  const auto c = embed({{"input", ids}})["data"][0]["embedding"].get<std::vector<float>>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], c[i], 1e-5) << i;

  const auto d = from_base64(embed(
      {{"input", "Once upon a time"}, {"encoding_format", "base64"}})["data"][0]["embedding"]);
  ASSERT_EQ(d.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], d[i]) << i;

  const auto last = embed({{"input", "Once upon a time"},
                           {"pooling", "last"},
                           {"normalize", false}})["data"][0]["embedding"]
                        .get<std::vector<float>>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(last[i] - a[i]);
  EXPECT_GT(diff, 1e-3) << "last-token pooling differs from the mean";

  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {{{"input", ""}}, "input"},
           {{{"input", json::array()}}, "input"},
           {{{"input", {1, 99999}}}, "input"},
           {{{"input", "x"}, {"dimensions", 8}}, "dimensions"},
           {{{"input", "x"}, {"encoding_format", "hex"}}, "encoding_format"},
           {{{"input", "x"}, {"pooling", "max"}}, "pooling"},
           {{{"input", "x"}, {"frobnicate", 1}}, "frobnicate"}}) {
    auto r = test::post_json(port, "/v1/embeddings", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["param"], field) << r.body;
  }
}

}  // namespace
}  // namespace ember
