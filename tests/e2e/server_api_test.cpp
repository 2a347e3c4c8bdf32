// `ember serve` end to end over HTTP with stories260K: the OpenAI request/response shapes, SSE
// streaming seen through curl, greedy output equal to `ember run`, and validation errors.
#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <fstream>
#include <memory>

#include "e2e/server_test_util.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "test_util.h"

namespace ember {
namespace {

using nlohmann::json;

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model)) return;
    server_ =
        std::make_unique<test::ServerProcess>("-m " + test::shell_quote(model.string()) + " -t 2");
  }
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    model_ = test::fixture("models/stories260K/stories260K.gguf").string();
    EMBER_REQUIRE_FIXTURE(model_);
    ASSERT_TRUE(server_ && server_->ready()) << (server_ ? server_->startup_error() : "");
    port_ = server_->port();
  }

  // Asserts an OpenAI-style error body with the given status.
  void expect_error(const test::HttpResult& r, int status, const std::string& param = "") {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
    EXPECT_TRUE(j["error"]["type"].is_string()) << r.body;
    EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code")) << r.body;
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  }

  std::string curl_stream(const json& body, const std::string& path) {
    auto dir = test::scratch_dir("curl");
    std::ofstream(dir / "body.json") << body.dump();
    std::string out;
    int rc = test::run_shell("curl -sN -H 'Content-Type: application/json' --data-binary @" +
                                 test::shell_quote((dir / "body.json").string()) + " " +
                                 server_->base_url() + path,
                             &out);
    EXPECT_EQ(rc, 0) << "curl failed";
    std::filesystem::remove_all(dir);
    return out;
  }

  static std::unique_ptr<test::ServerProcess> server_;
  std::string model_;
  int port_ = 0;
};

std::unique_ptr<test::ServerProcess> ServerApi::server_;

TEST_F(ServerApi, HealthModelsAndUnknownRoutes) {
  auto h = test::http_get(port_, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(json::parse(h.body)["status"], "ok");
  auto m = test::http_get(port_, "/v1/models");
  ASSERT_EQ(m.status, 200);
  json models = json::parse(m.body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "stories260K");
  EXPECT_EQ(models["data"][0]["object"], "model");
  expect_error(test::http_get(port_, "/v1/nothing"), 404);
  expect_error(test::http_post(port_, "/v1/audio/speech", "{}"), 404);
  auto metrics = test::http_get(port_, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("# TYPE ember_kv_blocks_used gauge"), std::string::npos);
  EXPECT_NE(metrics.body.find("ember_time_to_first_token_seconds_bucket"), std::string::npos);
}

TEST_F(ServerApi, GreedyCompletionEqualsEmberRun) {
  const std::string prompt = "Once upon a time";
  std::string expected = test::ember_run_greedy(model_, prompt, 48);
  auto r = test::post_json(
      port_, "/v1/completions",
      {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  const json& usage = j["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 5);  // BOS + 4
  int64_t completion = usage["completion_tokens"];
  EXPECT_EQ(usage["total_tokens"], 5 + completion);
  EXPECT_TRUE(usage["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  std::string finish = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" ? completion == 48 : finish == "stop") << r.body;
}

TEST_F(ServerApi, ChatWithPlainTemplateEqualsEmberRun) {
  std::string expected = test::ember_run_greedy(model_, "Lily wanted", 40);
  auto r =
      test::post_json(port_, "/v1/chat/completions",
                      {{"model", "stories260K"},
                       {"messages", json::array({{{"role", "user"}, {"content", "Lily wanted"}}})},
                       {"max_tokens", 40},
                       {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], expected);
}

TEST_F(ServerApi, CompletionFromTokenIdsAndEmptyPrompt) {
  // An empty prompt is BOS alone; like `ember run`, the first token's leading space is dropped.
  auto r = test::post_json(port_, "/v1/completions",
                           {{"prompt", ""}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::string from_bos = json::parse(r.body)["choices"][0]["text"];
  auto ids =
      test::post_json(port_, "/v1/completions",
                      {{"prompt", json::array({1})}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(json::parse(ids.body)["usage"]["prompt_tokens"], 1);
  EXPECT_FALSE(from_bos.empty());
  EXPECT_NE(from_bos[0], ' ');
  std::ifstream in(test::fixture("models/stories260K/expected-greedy-200.txt"));
  std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(expected.rfind(from_bos, 0), 0u) << from_bos;
}

// /tokenize and /detokenize use the model's tokenizer: the same ids as encoding here, pieces on
// request, decode back to the text; unknown fields and bad ids are refused by name.
TEST_F(ServerApi, TokenizeAndDetokenize) {
  const auto tok = load_tokenizer_from_gguf(model_);
  const std::string text = "Once upon a time, Lily saw a big red ball.";
  auto r = test::post_json(port_, "/tokenize", {{"content", text}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<int32_t> ids = json::parse(r.body)["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, tok->encode_with_special(text, false, true));
  auto with_bos = test::post_json(port_, "/tokenize", {{"content", text}, {"add_special", true}});
  ASSERT_EQ(with_bos.status, 200) << with_bos.body;
  EXPECT_EQ(json::parse(with_bos.body)["tokens"][0], tok->bos_id());
  auto pieces = test::post_json(port_, "/tokenize", {{"content", "Once"}, {"with_pieces", true}});
  ASSERT_EQ(pieces.status, 200) << pieces.body;
  const json first = json::parse(pieces.body)["tokens"][0];
  EXPECT_EQ(first["piece"], tok->token_bytes(first["id"].get<int32_t>()));

  auto back = test::post_json(port_, "/detokenize", {{"tokens", ids}});
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(json::parse(back.body)["content"], tok->decode(ids));

  expect_error(test::post_json(port_, "/tokenize", {{"content", "x"}, {"add_bos", true}}), 400,
               "add_bos");
  expect_error(test::post_json(port_, "/tokenize", {{"text", "x"}}), 400, "text");
  expect_error(test::post_json(port_, "/tokenize", {{"content", 5}}), 400, "content");
  expect_error(test::post_json(port_, "/detokenize", {{"tokens", {1, 100000}}}), 400, "tokens");
  expect_error(test::http_post(port_, "/detokenize", "[1, 2"), 400);
}

TEST_F(ServerApi, StopStringsAndLogprobs) {
  auto r = test::post_json(port_, "/v1/completions",
                           {{"prompt", "Once upon a time"},
                            {"max_tokens", 60},
                            {"temperature", 0},
                            {"stop", json::array({"Lily", "park"})},
                            {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  std::string full = test::ember_run_greedy(model_, "Once upon a time", 60);
  size_t cut = std::min(full.find("Lily"), full.find("park"));
  ASSERT_NE(cut, std::string::npos) << "the greedy text should contain a stop string: " << full;
  EXPECT_EQ(j["choices"][0]["text"], full.substr(0, cut));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
}

// echo: the prompt's tokens come back first with the logprobs the model gives each of them after
// the tokens before it. Greedy-decode 8 tokens with logprobs, then send prompt + those tokens with
// echo and max_tokens 0: the echoed logprobs of the 8 must be the ones decoding reported (prefill
// rows against decode rows: equal up to float reassociation), top alternatives included; the first
// token (no context) has none. A string prompt echoes verbatim, without a BOS the tokenizer added.
TEST_F(ServerApi, EchoReturnsThePromptWithTheLogprobsDecodingGave) {
  auto ids_r =
      test::post_json(port_, "/tokenize", {{"content", "Once upon a time"}, {"add_special", true}});
  ASSERT_EQ(ids_r.status, 200) << ids_r.body;
  std::vector<int32_t> prompt = json::parse(ids_r.body)["tokens"].get<std::vector<int32_t>>();
  auto gen = test::post_json(port_, "/v1/completions",
                             {{"prompt", prompt},
                              {"max_tokens", 8},
                              {"temperature", 0},
                              {"ignore_eos", true},
                              {"logprobs", 2}});
  ASSERT_EQ(gen.status, 200) << gen.body;
  const json glp = json::parse(gen.body)["choices"][0]["logprobs"];
  ASSERT_EQ(glp["token_logprobs"].size(), 8u) << gen.body;
  auto tok = load_tokenizer_from_gguf(model_);
  std::vector<int32_t> all = prompt;
  // The id whose bytes the response named, searched from the top of the vocabulary: a piece like
  // "," has a byte-fallback twin (<0x2C>) lower down that greedy decoding does not produce.
  for (const json& t : glp["tokens"]) {
    int32_t id = tok->vocab_size() - 1;
    while (id >= 0 && tok->token_bytes(id) != t.get<std::string>()) --id;
    ASSERT_GE(id, 0) << t;
    all.push_back(id);
  }
  auto echo =
      test::post_json(port_, "/v1/completions",
                      {{"prompt", all}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  const json ej = json::parse(echo.body);
  const json& choice = ej["choices"][0];
  EXPECT_EQ(choice["text"], tok->decode(all));
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(ej["usage"]["completion_tokens"], 0);
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), all.size()) << echo.body;
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < prompt.size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0) << i;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u) << i;
  }
  for (size_t k = 0; k < 8; ++k) {
    const size_t i = prompt.size() + k;
    EXPECT_EQ(lp["tokens"][i], glp["tokens"][k]) << k;
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), glp["token_logprobs"][k].get<double>(), 1e-3)
        << k;
    for (const auto& [text, value] : glp["top_logprobs"][k].items()) {
      ASSERT_TRUE(lp["top_logprobs"][i].contains(text)) << k << " " << text;
      EXPECT_NEAR(lp["top_logprobs"][i][text].get<double>(), value.get<double>(), 1e-3);
    }
  }
  // Greedy: each generated token was the most likely one.
  for (size_t k = 0; k < 8; ++k) {
    double best = -1e30;
    for (const auto& [text, value] : lp["top_logprobs"][prompt.size() + k].items()) {
      best = std::max(best, value.get<double>());
    }
    EXPECT_NEAR(lp["token_logprobs"][prompt.size() + k].get<double>(), best, 1e-6) << k;
  }

  auto text = test::post_json(port_, "/v1/completions",
                              {{"prompt", "Once upon a time"},
                               {"max_tokens", 4},
                               {"temperature", 0},
                               {"echo", true},
                               {"logprobs", 0}});
  ASSERT_EQ(text.status, 200) << text.body;
  const json tj = json::parse(text.body)["choices"][0];
  const std::string full = tj["text"];
  EXPECT_EQ(full, "Once upon a time" + test::ember_run_greedy(model_, "Once upon a time", 4));
  // The BOS the tokenizer added is not echoed; the first echoed token has a logprob after it.
  EXPECT_EQ(tj["logprobs"]["tokens"].size(), prompt.size() - 1 + 4) << text.body;
  EXPECT_FALSE(tj["logprobs"]["token_logprobs"][0].is_null()) << text.body;
  EXPECT_EQ(tj["logprobs"]["text_offset"][0], 0);

  // Streamed, the same request sends the echo first, then the same tokens, offsets counting on.
  json body = {{"prompt", "Once upon a time"},
               {"max_tokens", 4},
               {"temperature", 0},
               {"echo", true},
               {"logprobs", 0},
               {"stream", true}};
  std::vector<std::string> events = test::sse_events(curl_stream(body, "/v1/completions"));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0])["choices"][0];
  EXPECT_EQ(first["text"], "Once upon a time");
  EXPECT_EQ(first["logprobs"]["tokens"].size(), prompt.size() - 1);
  for (size_t k = 0; k + 1 < prompt.size(); ++k) {
    EXPECT_EQ(first["logprobs"]["token_logprobs"][k], tj["logprobs"]["token_logprobs"][k]) << k;
  }
  std::string streamed;
  json streamed_logprobs = json::array();
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json c = json::parse(events[i])["choices"][0];
    streamed += c["text"].get<std::string>();
    for (const json& l : c["logprobs"]["token_logprobs"]) streamed_logprobs.push_back(l);
    if (i > 0) {  // generated tokens: offsets past the echoed prompt
      EXPECT_GE(c["logprobs"]["text_offset"][0].get<int64_t>(), 16) << events[i];
    }
  }
  EXPECT_EQ(streamed, full);
  EXPECT_EQ(streamed_logprobs, tj["logprobs"]["token_logprobs"]);
  expect_error(test::post_json(port_, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 0}}), 400,
               "max_tokens");
}

// logit_bias and min_tokens: +100 on EOS (id 2 in stories260K's vocabulary) ends a greedy
// completion at once; min_tokens 5 holds EOS back for exactly 5 tokens; -100 on the greedy first
// token makes the completion start with another one.
TEST_F(ServerApi, LogitBiasAndMinTokens) {
  const std::string c = "/v1/completions";
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 0}};
  json eos = base;
  eos["logit_bias"] = {{"2", 100}};
  auto r = test::post_json(port_, c, eos);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 0) << r.body;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  eos["min_tokens"] = 5;
  r = test::post_json(port_, c, eos);
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5) << r.body;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const std::string greedy = test::ember_run_greedy(model_, "Once upon a time", 20);
  // The greedy first token: the one after the prompt's in the tokenized prompt + continuation.
  r = test::post_json(port_, "/tokenize", {{"content", "Once upon a time"}, {"add_special", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t n_prompt = json::parse(r.body)["tokens"].size();
  r = test::post_json(port_, "/tokenize",
                      {{"content", "Once upon a time" + greedy}, {"add_special", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const int first = json::parse(r.body)["tokens"][n_prompt].get<int>();
  json ban = base;
  ban["logit_bias"] = {{std::to_string(first), -100}};
  r = test::post_json(port_, c, ban);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = json::parse(r.body)["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_NE(text.substr(0, 3), greedy.substr(0, 3)) << text << " | " << greedy;
}

// n = 3: three choices (index 0..2), choice i sampled with seed + i (so each equals an n = 1
// request with that seed), usage counting the prompt once and every completion; choices 1 and 2
// start after choice 0's prefill and find its full prompt blocks in the prefix cache. Streamed,
// every choice's chunks carry its index and its own finish chunk, with the same text.
TEST_F(ServerApi, NChoicesShareThePromptAndFollowTheirSeeds) {
  const std::string c = "/v1/completions";
  const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to";
  json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0.9}, {"seed", 40}};
  auto before = test::server_metrics(port_);
  body["n"] = 3;
  auto r = test::post_json(port_, c, body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 3u) << r.body;
  auto after = test::server_metrics(port_);
  EXPECT_GE(
      after["ember_prefix_cache_hit_blocks_total"] - before["ember_prefix_cache_hit_blocks_total"],
      2);  // choices 1 and 2 each hit the prompt's first full block
  int64_t completion = 0;
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const json& choice = j["choices"][i];
    EXPECT_EQ(choice["index"], i);
    texts.push_back(choice["text"]);
    json one = body;
    one["n"] = 1;
    one["seed"] = 40 + i;
    auto single = test::post_json(port_, c, one);
    ASSERT_EQ(single.status, 200) << single.body;
    const json s = json::parse(single.body);
    EXPECT_EQ(choice["text"], s["choices"][0]["text"]) << "choice " << i;
    completion += s["usage"]["completion_tokens"].get<int64_t>();
    if (i == 0) {
      EXPECT_EQ(j["usage"]["prompt_tokens"], s["usage"]["prompt_tokens"]);
    }
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  EXPECT_NE(texts[0], texts[1]);  // different seeds
  body["stream"] = true;
  const std::string out = curl_stream(body, c);
  std::vector<std::string> streamed(3);
  int finishes = 0;
  for (const std::string& ev : test::sse_events(out)) {
    if (ev == "[DONE]") continue;
    const json chunk = json::parse(ev);
    ASSERT_EQ(chunk["choices"].size(), 1u) << ev;
    const int index = chunk["choices"][0]["index"];
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 3);
    streamed[static_cast<size_t>(index)] += chunk["choices"][0]["text"].get<std::string>();
    finishes += !chunk["choices"][0]["finish_reason"].is_null();
  }
  EXPECT_EQ(finishes, 3);
  EXPECT_EQ(streamed, texts);
  EXPECT_EQ(out.substr(out.size() - 14), "data: [DONE]\n\n");
}

TEST_F(ServerApi, ChatStreamThroughCurlHasOpenAIsChunkFormat) {
  json body = {{"model", "stories260K"},
               {"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
               {"max_tokens", 30},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  std::string out = curl_stream(body, "/v1/chat/completions");
  ASSERT_GE(out.size(), 14u);
  EXPECT_EQ(out.substr(out.size() - 14), "data: [DONE]\n\n");
  std::vector<std::string> events = test::sse_events(out);
  ASSERT_GE(events.size(), 4u) << out;
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  std::string text;
  std::string id = first["id"];
  size_t i = 1;  // content chunks until the one carrying finish_reason
  for (; i < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["id"], id);
    ASSERT_EQ(c["choices"].size(), 1u) << events[i];
    if (!c["choices"][0]["finish_reason"].is_null()) break;
    text += c["choices"][0]["delta"]["content"].get<std::string>();
    EXPECT_TRUE(c["usage"].is_null());
  }
  ASSERT_LT(i + 2, events.size()) << out;
  json fin = json::parse(events[i]);
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_TRUE(fin["choices"][0]["finish_reason"] == "length" ||
              fin["choices"][0]["finish_reason"] == "stop");
  json usage = json::parse(events[i + 1]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(i + 2, events.size() - 1);
  EXPECT_EQ(text, test::ember_run_greedy(model_, "Once upon a time", 30));
}

TEST_F(ServerApi, CompletionStreamThroughCurl) {
  json body = {{"prompt", "Lily and Ben"},
               {"max_tokens", 16},
               {"temperature", 0},
               {"stream", true},
               {"ignore_eos", true}};
  std::string out = curl_stream(body, "/v1/completions");
  std::vector<std::string> events = test::sse_events(out);
  ASSERT_GE(events.size(), 3u) << out;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
  }
  json fin = json::parse(events[events.size() - 2]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(fin["choices"][0]["text"], "");
  EXPECT_EQ(text, test::ember_run_greedy(model_, "Lily and Ben", 16, /*ignore_eos=*/true));
}

TEST_F(ServerApi, BadRequestsGetOpenAIErrorsAndTheServerStaysUp) {
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  expect_error(test::http_post(port_, c, "{not json"), 400);
  expect_error(test::http_post(port_, c, "[1, 2]"), 400);
  expect_error(test::post_json(port_, c, {{"max_tokens", 5}}), 400, "prompt");
  expect_error(test::post_json(port_, c, {{"prompt", 42}}), 400, "prompt");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"temperature", "hot"}}), 400,
               "temperature");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"max_tokens", -5}}), 400, "max_tokens");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"max_tokens", 1.5}}), 400,
               "max_tokens");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"max_tokens", 100000}}), 400,
               "max_tokens");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"n", 17}}), 400, "n");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"n", 0}}), 400, "n");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"stream", "yes"}}), 400, "stream");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"stop", json::array({1})}}), 400,
               "stop");
  expect_error(test::post_json(port_, c, {{"prompt", json::array({1, 100000})}}), 400);
  expect_error(test::post_json(port_, chat, {{"messages", json::array()}}), 400, "messages");
  expect_error(test::post_json(port_, chat, {{"prompt", "a"}}), 400, "messages");
  // Fields ember does not handle are refused by name, never ignored; null asks for nothing.
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  expect_error(test::post_json(port_, chat, {{"messages", hi}, {"tools", json::object()}}), 400,
               "tools");
  expect_error(test::post_json(port_, chat, {{"messages", hi}, {"functions", json::array()}}), 400,
               "functions");
  expect_error(
      test::post_json(port_, chat, {{"messages", hi}, {"response_format", {{"type", "xml"}}}}), 400,
      "response_format");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"suffix", "z"}}), 400, "suffix");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"logit_bias", {{"x7", 5}}}}), 400,
               "logit_bias");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"logit_bias", {{"7", 500}}}}), 400,
               "logit_bias");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"logit_bias", {{"99999", 1}}}}), 400,
               "logit_bias");  // outside the vocabulary
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"min_tokens", -1}}), 400, "min_tokens");
  expect_error(test::post_json(port_, c, {{"prompt", "a"}, {"min_tokens", 9}, {"max_tokens", 3}}),
               400, "min_tokens");
  // A field no API knows is ignored (with a warning in the log) unless --strict-api.
  EXPECT_EQ(
      test::post_json(port_, c, {{"prompt", "a"}, {"max_tokens", 2}, {"frobnicate", 1}}).status,
      200);
  auto accepted = test::post_json(
      port_, chat, {{"messages", hi}, {"tools", nullptr}, {"user", "u-1"}, {"max_tokens", 2}});
  EXPECT_EQ(accepted.status, 200) << accepted.body;
  expect_error(
      test::post_json(port_, chat,
                      {{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}),
      400, "messages[0].role");
  expect_error(test::post_json(port_, chat,
                               {{"messages", json::array({{{"role", "user"}, {"content", 7}}})}}),
               400, "messages[0].content");
  // A 10 MB prompt: refused cleanly without tokenizing it.
  std::string huge(10u << 20, 'a');
  expect_error(test::post_json(port_, c, {{"prompt", huge}, {"max_tokens", 4}}), 400, "prompt");
  // A body over the server's limit never reaches the handler.
  std::string giant = "{\"prompt\": \"" + std::string(40u << 20, 'b') + "\"}";
  auto too_big = test::http_post(port_, c, giant);
  EXPECT_TRUE(too_big.status == 413 || too_big.status == 0) << too_big.status;
  EXPECT_EQ(test::http_get(port_, "/health").status, 200);
  auto ok = test::post_json(port_, c, {{"prompt", "a"}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Every error path answers in one shape; a bad field is named in "param", and the reasons a
// client may branch on are in "code".
TEST_F(ServerApi, ErrorsNameTheBadFieldInParam) {
  auto bad = test::post_json(
      port_, "/v1/chat/completions",
      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"temperature", 7}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(json::parse(bad.body),
            json({{"error",
                   {{"message", "'temperature' must be between 0 and 2, got 7"},
                    {"type", "invalid_request_error"},
                    {"param", "temperature"},
                    {"code", nullptr}}}}));

  auto too_long =
      test::post_json(port_, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 100000}});
  expect_error(too_long, 400, "max_tokens");
  EXPECT_EQ(json::parse(too_long.body)["error"]["code"], "context_length_exceeded");

  auto no_route = test::http_get(port_, "/v1/nothing");
  expect_error(no_route, 404);
  EXPECT_EQ(json::parse(no_route.body)["error"]["code"], "not_found");
  EXPECT_TRUE(json::parse(no_route.body)["error"]["param"].is_null());
}

// `serve --kv-dtype f16` runs on an f16 cache (named in its startup line) and its greedy completion
// equals `ember run --kv-dtype f16` for the same prompt.
TEST(ServerKvDtype, F16CacheCompletionEqualsEmberRunWithF16Cache) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --kv-dtype f16");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  EXPECT_NE(server.log().find("f16 KV blocks"), std::string::npos) << server.log();
  const std::string prompt = "Once upon a time";
  auto run = test::run_ember("run -m " + test::shell_quote(model.string()) + " -p " +
                             test::shell_quote(prompt) + " --temp 0 -n 32 --kv-dtype f16");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string expected = run.out.substr(std::min(run.out.size(), prompt.size()));
  if (!expected.empty() && expected.back() == '\n') expected.pop_back();
  auto r = test::post_json(
      server.port(), "/v1/completions",
      {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], expected);
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

// The KV pool is sized from --mem (what the weights leave), and says so at startup; a --mem too
// small for anything beside the weights is refused before serving.
TEST(ServerKvPool, SizedFromMemAndPrintedAtStartup) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  // stories260K: 5 layers x 2 x 4 kv heads x 8 x 4 B = 1,280 B per token, 20,480 B per block of
  // 16; its weights are ~1 MB, so 64 MiB leaves ~3,230 blocks.
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 1 --mem 64MiB");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  const std::string log = server.log();
  EXPECT_NE(log.find("KV pool 66."), std::string::npos) << log;
  EXPECT_NE(log.find("(--mem 64MiB minus the weights)"), std::string::npos) << log;
  // The plan beside it: 1,280 B per token (f32 cache), 32 sequences x the 2,048-token context
  // (more than the 64 MiB leave: the pool is what --mem allows).
  EXPECT_NE(log.find("[ember] plan: weights 1.0 MB"), std::string::npos) << log;
  EXPECT_NE(log.find("KV 1280 bytes per token; 32 sequences x 2048 tokens need 83.9 MB"),
            std::string::npos)
      << log;
  EXPECT_EQ(server.stop(SIGTERM), 0);

  // A per-channel q4_0 K and an early-exit draft: the exact rows and the draft's K/V in each block
  // come out of the same 64 MiB (kv_pool_costs_test.cpp has the arithmetic), and the plan names
  // both.
  test::ServerProcess drafted("-m " + test::shell_quote(model.string()) +
                              " -t 1 --mem 64MiB --kv-dtype q4_0 --draft-layers 2");
  ASSERT_TRUE(drafted.ready()) << drafted.startup_error();
  const std::string drafted_log = drafted.log();
  // 64-token blocks (a per-channel K cache's default): 45.0 MB beside the draft's 18.0 MB and up
  // to 3.1 MB of exact rows.
  EXPECT_NE(drafted_log.find("q4_0c/q4_0 KV blocks of 64"), std::string::npos) << drafted_log;
  EXPECT_NE(drafted_log.find("KV pool 45.0 MB"), std::string::npos) << drafted_log;
  EXPECT_NE(drafted_log.find("plan: per-channel K keeps the exact rows"), std::string::npos)
      << drafted_log;
  EXPECT_NE(drafted_log.find("plan: the draft's K/V in the same "), std::string::npos)
      << drafted_log;
  EXPECT_EQ(drafted.stop(SIGTERM), 0);

  const auto r = test::run_ember("serve -m " + test::shell_quote(model.string()) + " --mem 100KB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--mem 100KB leaves no room for the KV cache"), std::string::npos) << r.err;
}

}  // namespace
// --api-key: every endpoint but /health wants the Bearer key; a wrong or missing one gets 401 in
// OpenAI's error shape. --api-key-file reads it from a file; a bad file fails at startup.
TEST(ServerAuth, ApiKeyGuardsEveryEndpointButHealth) {
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto dir = test::scratch_dir("api-key");
  std::ofstream(dir / "key") << "s3cret-key\n";
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2 --api-key-file " +
                             test::shell_quote((dir / "key").string()));
  ASSERT_TRUE(server.ready()) << server.startup_error();
  httplib::Client client("127.0.0.1", server.port());
  EXPECT_EQ(client.Get("/health")->status, 200);
  for (const char* path : {"/v1/models", "/metrics", "/no/such/path"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["code"], "invalid_api_key");
  }
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 3}}.dump();
  EXPECT_EQ(client.Post("/v1/completions", body, "application/json")->status, 401);
  EXPECT_EQ(client
                .Post("/v1/completions", {{"Authorization", "Bearer wrong-key-0"}}, body,
                      "application/json")
                ->status,
            401);
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret-key"}};
  EXPECT_EQ(client.Get("/v1/models", auth)->status, 200);
  EXPECT_EQ(client.Post("/v1/completions", auth, body, "application/json")->status, 200);

  test::ServerProcess bad("-m " + test::shell_quote(model.string()) + " --api-key-file " +
                          test::shell_quote((dir / "missing").string()));
  EXPECT_FALSE(bad.ready());
  EXPECT_NE(bad.log().find("--api-key-file"), std::string::npos) << bad.log();
}

// On loopback, requests addressed to another host name (DNS rebinding) or sent from another
// site's page (Origin) are refused with 403; the loopback names and origins are served.
TEST_F(ServerApi, LoopbackRefusesForeignHostAndOrigin) {
  httplib::Client client("127.0.0.1", port_);
  auto foreign_host = client.Get("/v1/models", {{"Host", "evil.example:8080"}});
  ASSERT_TRUE(foreign_host);
  EXPECT_EQ(foreign_host->status, 403) << foreign_host->body;
  EXPECT_EQ(json::parse(foreign_host->body)["error"]["code"], "forbidden_origin");
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 2}}.dump();
  auto cross_site = client.Post("/v1/completions", {{"Origin", "https://evil.example"}}, body,
                                "application/json");
  ASSERT_TRUE(cross_site);
  EXPECT_EQ(cross_site->status, 403) << cross_site->body;
  EXPECT_EQ(client.Get("/v1/models", {{"Host", "localhost:1234"}})->status, 200);
  EXPECT_EQ(
      client
          .Post("/v1/completions", {{"Origin", "http://localhost:3000"}}, body, "application/json")
          ->status,
      200);
}

}  // namespace ember

namespace ember {
namespace {

// A mixture of experts serves like any model, and /metrics counts the tokens routed to each
// expert: every token processed goes to 4 of OLMoE's 16 experts in each of its 2 layers.
TEST(ServerMoe, MetricsCountTheTokensRoutedToEachExpert) {
  const auto model = test::fixture("models/moe-zoo/olmoe.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  test::ServerProcess server("-m " + test::shell_quote(model.string()) + " -t 2");
  ASSERT_TRUE(server.ready()) << server.startup_error();
  auto r = test::post_json(server.port(), "/v1/completions",
                           {{"prompt", std::vector<int>{5, 6, 7, 8, 9}},
                            {"max_tokens", 8},
                            {"temperature", 0},
                            {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto m = test::server_metrics(server.port());
  double routed = 0;
  int experts = 0;
  for (const auto& [name, value] : m) {
    if (name.rfind("ember_expert_routed_tokens_total{", 0) == 0) {
      routed += value;
      ++experts;
    }
  }
  EXPECT_EQ(experts, 16);
  // 5 prompt tokens and 7 decoded ones (the 8th is sampled, never run) x 4 experts x 2 layers.
  EXPECT_EQ(routed, 12 * 4 * 2);
}

}  // namespace
}  // namespace ember
