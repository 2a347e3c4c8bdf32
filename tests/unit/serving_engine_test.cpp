// The serving engine's batching must not change results: greedy tokens of many concurrent
// requests (chunked prefill, preemption, prefix caching) equal one-at-a-time generation.
#include <gtest/gtest.h>

#include <map>

#include "ember/engine/generator.h"
#include "ember/engine/serving_engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

class ServingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    LoadOptions o;
    o.path = path.string();
    o.backend.n_threads = 2;
    model_ = std::make_unique<LoadedModel>(load_model(o));
  }

  std::vector<int32_t> prompt(int n, int salt) const {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 31 + salt * 17) % 500);
    return p;
  }

  // Greedy tokens generated one request at a time (the reference).
  std::vector<int32_t> reference(const std::vector<int32_t>& p, int64_t max_tokens) {
    EngineOptions eo;
    eo.max_context = 512;
    Engine engine(model_->weights, eo);
    SamplingParams sp;
    sp.temperature = 0;
    Sampler sampler(sp, static_cast<int32_t>(engine.vocab_size()));
    GenerateOptions go;
    go.max_new_tokens = max_tokens;
    go.eos_token_id = -1;
    std::vector<int32_t> out;
    Sequence seq;
    generate(engine, seq, p, go, sampler, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    return out;
  }

  GenerationRequest greedy(std::vector<int32_t> p, int64_t max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  // Runs `engine` synchronously until every stream has finished; returns tokens per stream.
  std::vector<std::vector<int32_t>> drain(ServingEngine& engine,
                                          std::vector<std::shared_ptr<RequestStream>>& streams,
                                          std::vector<StreamEvent>* finals = nullptr) {
    std::vector<std::vector<int32_t>> tokens(streams.size());
    std::vector<bool> done(streams.size(), false);
    if (finals) finals->assign(streams.size(), StreamEvent{});
    for (int guard = 0; guard < 100000; ++guard) {
      engine.step();
      bool all = true;
      for (size_t i = 0; i < streams.size(); ++i) {
        while (auto e = streams[i]->pop(std::chrono::milliseconds(0))) {
          tokens[i].insert(tokens[i].end(), e->tokens.begin(), e->tokens.end());
          if (e->finished) {
            done[i] = true;
            if (finals) (*finals)[i] = *e;
          }
        }
        all = all && done[i];
      }
      if (all) return tokens;
    }
    ADD_FAILURE() << "requests did not finish";
    return tokens;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_F(ServingEngineTest, ConcurrentGreedyRequestsMatchOneAtATime) {
  ServingOptions so;
  so.engine.max_context = 512;
  so.engine.max_sequences = 8;
  so.scheduler.max_batched_tokens = 24;  // forces chunked prefill of the longer prompts
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(prompt(3 + i * 9, i));
    lengths.push_back(10 + i * 5);
    SubmitError err;
    streams.push_back(engine.submit(greedy(prompts.back(), lengths.back()), &err, nullptr));
    ASSERT_NE(streams.back(), nullptr);
  }
  std::vector<StreamEvent> finals;
  auto got = drain(engine, streams, &finals);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], reference(prompts[i], lengths[i])) << "request " << i;
    EXPECT_EQ(finals[i].finish_reason, FinishReason::Length);
    EXPECT_EQ(finals[i].completion_tokens, lengths[i]);
    EXPECT_EQ(finals[i].prompt_tokens, static_cast<int64_t>(prompts[i].size()));
  }
  auto m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
  EXPECT_EQ(m.requests_finished, 8u);
}

TEST_F(ServingEngineTest, PreemptionWithATinyPoolStillGivesCorrectResults) {
  ServingOptions so;
  so.engine.max_context = 128;
  so.engine.block_size = 8;
  so.engine.kv_blocks = 12;  // 96 tokens for 6 sequences that each grow to ~60
  so.scheduler.max_batched_tokens = 64;
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt(10 + i, i));
    streams.push_back(engine.submit(greedy(prompts.back(), 48), nullptr, nullptr));
    ASSERT_NE(streams.back(), nullptr);
  }
  auto got = drain(engine, streams);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], reference(prompts[i], 48)) << i;
  auto m = engine.metrics();
  EXPECT_GT(m.preemptions_total, 0u) << "the pool was meant to be too small";
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST_F(ServingEngineTest, PrefixCacheHitsEveryFullBlockOfASharedPrefix) {
  ServingOptions so;
  so.engine.max_context = 512;
  so.engine.max_sequences = 4;
  so.engine.prefix_caching = true;
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  auto p = prompt(300, 5);
  std::vector<std::shared_ptr<RequestStream>> first = {
      engine.submit(greedy(p, 8), nullptr, nullptr)};
  std::vector<StreamEvent> f1, f2;
  auto a = drain(engine, first, &f1);
  std::vector<std::shared_ptr<RequestStream>> second = {
      engine.submit(greedy(p, 8), nullptr, nullptr)};
  auto b = drain(engine, second, &f2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(f1[0].cached_prompt_tokens, 0);
  EXPECT_EQ(f2[0].cached_prompt_tokens,
            (300 - 1) / 16 * 16);  // every full block before the last token
  auto m = engine.metrics();
  EXPECT_EQ(m.prefix_hit_blocks, (300 - 1) / 16);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST_F(ServingEngineTest, CancelFreesBlocksAndStopStringsEndTheText) {
  ServingOptions so;
  so.engine.max_context = 256;
  so.engine.max_sequences = 2;
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  auto cancelled = engine.submit(greedy(prompt(20, 1), 100), nullptr, nullptr);
  engine.step();
  engine.step();
  cancelled->cancel();
  engine.step();
  bool saw_cancel = false;
  while (auto e = cancelled->pop(std::chrono::milliseconds(0)))
    saw_cancel |= e->finish_reason == FinishReason::Cancelled;
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);

  // Greedy from BOS writes "Once upon a time, there was..."; stop at ", there".
  GenerationRequest r = greedy({1}, 50);
  r.stop = {", there"};
  auto s = engine.submit(r, nullptr, nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams = {s};
  std::string text;
  FinishReason reason = FinishReason::None;
  for (int i = 0; i < 200 && reason == FinishReason::None; ++i) {
    engine.step();
    while (auto e = s->pop(std::chrono::milliseconds(0))) {
      text += e->text;
      if (e->finished) reason = e->finish_reason;
    }
  }
  EXPECT_EQ(reason, FinishReason::Stop);
  EXPECT_EQ(text, " Once upon a time");
}

TEST_F(ServingEngineTest, RefusesWhatCanNeverFitAndWhenTheQueueIsFull) {
  ServingOptions so;
  so.engine.max_context = 64;
  so.max_waiting = 2;
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  SubmitError err = SubmitError::None;
  std::string msg;
  EXPECT_EQ(engine.submit(greedy(prompt(60, 0), 10), &err, &msg), nullptr);
  EXPECT_EQ(err, SubmitError::TooLong);
  EXPECT_NE(msg.find("70"), std::string::npos) << msg;
  EXPECT_NE(engine.submit(greedy(prompt(5, 0), 4), &err, nullptr), nullptr);
  EXPECT_NE(engine.submit(greedy(prompt(5, 1), 4), &err, nullptr), nullptr);
  EXPECT_EQ(engine.submit(greedy(prompt(5, 2), 4), &err, nullptr), nullptr);
  EXPECT_EQ(err, SubmitError::QueueFull);
}

TEST_F(ServingEngineTest, BackgroundLoopServesAndShutsDownCleanly) {
  ServingOptions so;
  so.engine.max_context = 256;
  so.engine.max_sequences = 4;
  ServingEngine engine(model_->weights, model_->tokenizer.get(), so);
  engine.start();
  auto p = prompt(12, 3);
  auto s = engine.submit(greedy(p, 20), nullptr, nullptr);
  std::vector<int32_t> got;
  for (;;) {
    auto e = s->pop(std::chrono::milliseconds(5000));
    ASSERT_TRUE(e.has_value()) << "timed out";
    got.insert(got.end(), e->tokens.begin(), e->tokens.end());
    if (e->finished) break;
  }
  EXPECT_EQ(got, reference(p, 20));
  engine.shutdown(false);
  SubmitError err;
  EXPECT_EQ(engine.submit(greedy(p, 2), &err, nullptr), nullptr);
  EXPECT_EQ(err, SubmitError::ShuttingDown);
}

}  // namespace
}  // namespace ember
