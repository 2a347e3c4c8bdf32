// The engine loop's batching must not change results: greedy tokens of many concurrent requests
// (chunked prefill, preemption, prefix caching) equal one request fed by hand; refusals, cancels,
// stop strings and the background loop of AsyncEngine.
#include <gtest/gtest.h>

#include <map>

#include "ember/core/error.h"
#include "ember/engine/async_engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

class AsyncEngineTest : public ::testing::Test {
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

  // Greedy tokens of one request alone, fed by hand (prompt, then one token per step): the
  // reference the engine's scheduling must not change.
  std::vector<int32_t> reference(const std::vector<int32_t>& p, int64_t max_tokens) {
    EngineOptions eo;
    eo.max_context = 512;
    test::StepEngine engine(model_->weights, eo);
    std::vector<int32_t> out;
    Sequence seq;
    std::span<const float> logits = engine.feed(seq, p);
    for (int64_t i = 0; i < max_tokens; ++i) {
      out.push_back(argmax(logits));
      logits = engine.feed(seq, std::span<const int32_t>(&out.back(), 1));
    }
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
  std::vector<std::vector<int32_t>> drain(AsyncEngine& engine,
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

TEST_F(AsyncEngineTest, ConcurrentGreedyRequestsMatchOneAtATime) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 512;
  so.engine.engine.max_sequences = 8;
  so.engine.scheduler.max_batched_tokens = 24;  // forces chunked prefill of the longer prompts
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(prompt(3 + i * 9, i));
    lengths.push_back(10 + i * 5);
    streams.push_back(engine.submit(greedy(prompts.back(), lengths.back())));
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

TEST_F(AsyncEngineTest, PreemptionWithATinyPoolStillGivesCorrectResults) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 128;
  so.engine.engine.block_size = 8;
  so.engine.engine.kv_blocks = 12;  // 96 tokens for 6 sequences that each grow to ~60
  so.engine.scheduler.max_batched_tokens = 64;
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt(10 + i, i));
    streams.push_back(engine.submit(greedy(prompts.back(), 48)));
    ASSERT_NE(streams.back(), nullptr);
  }
  auto got = drain(engine, streams);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], reference(prompts[i], 48)) << i;
  auto m = engine.metrics();
  EXPECT_GT(m.preemptions_total, 0u) << "the pool was meant to be too small";
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST_F(AsyncEngineTest, PrefixCacheHitsEveryFullBlockOfASharedPrefix) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 512;
  so.engine.engine.max_sequences = 4;
  so.engine.engine.prefix_caching = true;
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  auto p = prompt(300, 5);
  std::vector<std::shared_ptr<RequestStream>> first = {engine.submit(greedy(p, 8))};
  std::vector<StreamEvent> f1, f2;
  auto a = drain(engine, first, &f1);
  std::vector<std::shared_ptr<RequestStream>> second = {engine.submit(greedy(p, 8))};
  auto b = drain(engine, second, &f2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(f1[0].cached_prompt_tokens, 0);
  EXPECT_EQ(f2[0].cached_prompt_tokens,
            (300 - 1) / 16 * 16);  // every full block before the last token
  auto m = engine.metrics();
  EXPECT_EQ(m.prefix_hit_blocks, (300 - 1) / 16);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST_F(AsyncEngineTest, CancelFreesBlocksAndStopStringsEndTheText) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 256;
  so.engine.engine.max_sequences = 2;
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  auto cancelled = engine.submit(greedy(prompt(20, 1), 100));
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
  auto s = engine.submit(r);
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

TEST_F(AsyncEngineTest, RefusesWhatCanNeverFitAndWhenTheQueueIsFull) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 64;
  so.max_waiting = 2;
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  try {
    engine.submit(greedy(prompt(60, 0), 10));
    ADD_FAILURE() << "60 + 10 tokens cannot fit a context of 64";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.field(), "max_tokens");
    EXPECT_EQ(e.reason(), "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
  EXPECT_NE(engine.submit(greedy(prompt(5, 0), 4)), nullptr);
  EXPECT_NE(engine.submit(greedy(prompt(5, 1), 4)), nullptr);
  try {
    engine.submit(greedy(prompt(5, 2), 4));
    ADD_FAILURE() << "the queue holds 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ResourceExhausted);
    EXPECT_EQ(e.reason(), "queue_full");
  }
  EXPECT_EQ(engine.metrics().requests_rejected, 1u);
}

TEST_F(AsyncEngineTest, BackgroundLoopServesAndShutsDownCleanly) {
  AsyncEngineOptions so;
  so.engine.engine.max_context = 256;
  so.engine.engine.max_sequences = 4;
  AsyncEngine engine(model_->weights, model_->tokenizer.get(), so);
  engine.start();
  auto p = prompt(12, 3);
  auto s = engine.submit(greedy(p, 20));
  std::vector<int32_t> got;
  for (;;) {
    auto e = s->pop(std::chrono::milliseconds(5000));
    ASSERT_TRUE(e.has_value()) << "timed out";
    got.insert(got.end(), e->tokens.begin(), e->tokens.end());
    if (e->finished) break;
  }
  EXPECT_EQ(got, reference(p, 20));
  engine.shutdown(false);
  try {
    engine.submit(greedy(p, 2));
    ADD_FAILURE() << "submit after shutdown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unavailable);
  }
}

}  // namespace
}  // namespace ember
