// LLMEngine decides a request's length in one place and serves scoring through the same loop:
// prompt logits equal a hand-fed forward step, max_tokens defaults to what the context leaves,
// stop_at_context ends with "length" instead of refusing, and the penalties live in the sampler.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

class LLMEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    LoadOptions o;
    o.path = path.string();
    model_ = std::make_unique<LoadedModel>(load_model(o));
  }

  std::vector<int32_t> prompt(int n) const {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 37) % 500);
    return p;
  }

  // Every event of one request, stepping the engine until it finishes.
  std::vector<StreamEvent> run(LLMEngine& engine, GenerationRequest r) {
    std::vector<StreamEvent> events;
    auto stream = engine.add_request(std::move(r));
    run_until_finished(engine, *stream, [&](StreamEvent& e) { events.push_back(e); });
    return events;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_F(LLMEngineTest, ScoringDeliversEveryPromptRowOnceAndGeneratesNothing) {
  const std::vector<int32_t> p = prompt(40);
  const auto V = static_cast<size_t>(model_->weights.config.vocab_size);
  EngineOptions eo;
  eo.max_context = 64;
  test::StepEngine by_hand(model_->weights, eo);
  Sequence seq;
  std::span<const float> z = by_hand.feed(seq, p, /*all_logits=*/true);
  const std::vector<float> want(z.begin(), z.end());
  for (int64_t budget : {int64_t{40}, int64_t{7}}) {  // one step; chunks of 7 over six steps
    SCOPED_TRACE("max_batched_tokens " + std::to_string(budget));
    LLMEngineOptions lo;
    lo.engine.max_context = 64;
    lo.scheduler.max_batched_tokens = budget;
    LLMEngine engine(model_->weights, nullptr, lo);
    GenerationRequest r;
    r.prompt = p;
    r.max_tokens = 0;
    r.prompt_logits = true;
    std::vector<float> got;
    int64_t generated = 0;
    FinishReason reason = FinishReason::None;
    for (StreamEvent& e : run(engine, r)) {
      got.insert(got.end(), e.prompt_logits.begin(), e.prompt_logits.end());
      generated += static_cast<int64_t>(e.tokens.size());
      if (e.finished) reason = e.finish_reason;
    }
    EXPECT_EQ(generated, 0);
    EXPECT_EQ(reason, FinishReason::Length);
    ASSERT_EQ(got.size(), p.size() * V);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max<double>(worst, std::fabs(got[i] - want[i]));
    if (budget == 40) {
      EXPECT_EQ(worst, 0.0) << "the same single step must give the same bits";
    } else {
      EXPECT_LT(worst, 1e-4) << "chunks only reassociate sums";
    }
    EXPECT_EQ(engine.kv().used_blocks(), 0);
  }
}

// Embeddings: the final hidden state of every prompt position, in order and whatever the
// chunking; each position's logits are its hidden state times lm_head (what the norm fed it).
TEST_F(LLMEngineTest, PromptHiddenStatesAreWhatTheLogitsAreMadeFrom) {
  const std::vector<int32_t> p = prompt(20);
  const ModelConfig& c = model_->weights.config;
  const auto V = static_cast<size_t>(c.vocab_size), D = static_cast<size_t>(c.d_model);
  std::vector<float> first;
  for (int64_t budget : {int64_t{20}, int64_t{7}}) {
    SCOPED_TRACE("max_batched_tokens " + std::to_string(budget));
    LLMEngineOptions lo;
    lo.engine.max_context = 64;
    lo.scheduler.max_batched_tokens = budget;
    LLMEngine engine(model_->weights, nullptr, lo);
    GenerationRequest r;
    r.prompt = p;
    r.max_tokens = 0;
    r.prompt_hidden = true;
    r.prompt_logits = true;
    std::vector<float> hidden, logits;
    for (StreamEvent& e : run(engine, r)) {
      hidden.insert(hidden.end(), e.prompt_hidden.begin(), e.prompt_hidden.end());
      logits.insert(logits.end(), e.prompt_logits.begin(), e.prompt_logits.end());
    }
    ASSERT_EQ(hidden.size(), p.size() * D);
    ASSERT_EQ(logits.size(), p.size() * V);
    if (first.empty()) {
      first = hidden;
    } else {
      for (size_t i = 0; i < hidden.size(); ++i) ASSERT_NEAR(hidden[i], first[i], 1e-4) << i;
    }
    const WeightMatrix& head = model_->weights.lm_head;
    ASSERT_EQ(head.dtype, DType::F32);  // stories260K: f32, rows as stored
    ASSERT_EQ(head.layout, WeightLayout::Rows);
    const auto* w = static_cast<const float*>(head.data);
    for (size_t t = 0; t < p.size(); t += 5) {
      for (size_t v = 0; v < V; v += 37) {
        double dot = 0;
        for (size_t i = 0; i < D; ++i) dot += double(hidden[t * D + i]) * w[v * D + i];
        EXPECT_NEAR(dot, logits[t * V + v], 1e-3) << "position " << t << " token " << v;
      }
    }
  }
}

TEST_F(LLMEngineTest, MaxTokensIsDecidedAtArrival) {
  LLMEngineOptions lo;
  lo.engine.max_context = 64;
  LLMEngine engine(model_->weights, nullptr, lo);
  GenerationRequest r;
  r.prompt = prompt(10);
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  // Unset: what the context leaves (54 < the default 256).
  EXPECT_EQ(engine.make_sequence(r)->max_tokens, 54);
  // Too many: refused, naming the field.
  r.max_tokens = 55;
  try {
    engine.make_sequence(r);
    ADD_FAILURE() << "10 + 55 > 64";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "max_tokens");
    EXPECT_EQ(e.reason(), "context_length_exceeded");
  }
  // Near 2^63 (the server saturates larger JSON integers to INT64_MAX): refused too, not
  // overflowed into a small sum.
  for (int64_t huge :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 5}) {
    r.max_tokens = huge;
    try {
      engine.make_sequence(r);
      ADD_FAILURE() << "max_tokens " << huge << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "max_tokens");
    }
  }
  r.max_tokens = 55;
  // stop_at_context: accepted, and generation ends with "length" when the context is full.
  r.stop_at_context = true;
  int64_t generated = 0;
  FinishReason reason = FinishReason::None;
  for (StreamEvent& e : run(engine, r)) {
    generated += static_cast<int64_t>(e.tokens.size());
    if (e.finished) reason = e.finish_reason;
  }
  EXPECT_EQ(generated, 54);
  EXPECT_EQ(reason, FinishReason::Length);
  // Bad prompts.
  r.prompt = {};
  EXPECT_THROW(engine.make_sequence(r), Error);
  r.prompt = {1, 100000};
  EXPECT_THROW(engine.make_sequence(r), Error);
}

TEST_F(LLMEngineTest, PresencePenaltyKeepsGreedyFromRepeatingItself) {
  LLMEngineOptions lo;
  lo.engine.max_context = 128;
  LLMEngine engine(model_->weights, nullptr, lo);
  GenerationRequest r;
  r.prompt = {1};
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.max_tokens = 40;
  auto tokens_of = [&](const GenerationRequest& req) {
    std::vector<int32_t> out;
    for (StreamEvent& e : run(engine, req)) out.insert(out.end(), e.tokens.begin(), e.tokens.end());
    return out;
  };
  const std::vector<int32_t> plain = tokens_of(r);
  r.sampling.presence_penalty = 2.0f;  // large enough to forbid any repeat on this tiny model
  const std::vector<int32_t> penalised = tokens_of(r);
  ASSERT_EQ(plain.size(), 40u);
  ASSERT_EQ(penalised.size(), 40u);
  auto distinct = [](std::vector<int32_t> v) {
    std::sort(v.begin(), v.end());
    return std::unique(v.begin(), v.end()) - v.begin();
  };
  EXPECT_LT(distinct(plain), 40) << "greedy stories260K repeats tokens within 40";
  EXPECT_GT(distinct(penalised), distinct(plain));
}

TEST_F(LLMEngineTest, ASessionResumesFromTheTokensItShares) {
  LLMEngineOptions lo;
  lo.engine.max_context = 128;
  LLMEngine engine(model_->weights, nullptr, lo);
  auto greedy = [&](std::vector<int32_t> p, int64_t session) {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.max_tokens = 12;
    r.session = session;
    std::vector<int32_t> out;
    int64_t reused = -1;
    for (StreamEvent& e : run(engine, r)) {
      out.insert(out.end(), e.tokens.begin(), e.tokens.end());
      if (e.finished) reused = e.cached_prompt_tokens;
    }
    return std::pair(out, reused);
  };
  const std::vector<int32_t> first = prompt(30);
  const auto [reply, reused0] = greedy(first, 7);
  EXPECT_EQ(reused0, 0);
  EXPECT_GT(engine.kv().used_blocks(), 0) << "the session keeps its blocks";
  // The next turn: the first turn's tokens, its reply (all but the last token, which never ran),
  // then new ones that diverge.
  std::vector<int32_t> next = first;
  next.insert(next.end(), reply.begin(), reply.end() - 1);
  next.push_back(77);
  next.push_back(78);
  const auto [resumed, reused1] = greedy(next, 7);
  EXPECT_EQ(reused1, static_cast<int64_t>(first.size() + reply.size() - 1));
  const auto [fresh, reused2] = greedy(next, 0);  // no session: computed from scratch
  EXPECT_EQ(reused2, 0);
  EXPECT_EQ(resumed, fresh);
  engine.end_session(7);
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

// A session's next turn that leaves the kept tokens inside a block another running sequence shares
// (through the prefix cache) resumes from that block's start instead of cutting into it (the cut
// threw, and the session's blocks were lost to the pool).
TEST_F(LLMEngineTest, ASessionCutInsideASharedBlockResumesFromTheBlockStart) {
  LLMEngineOptions lo;
  lo.engine.max_context = 128;
  lo.engine.prefix_caching = true;
  LLMEngine engine(model_->weights, nullptr, lo);
  const auto request = [](std::vector<int32_t> p, int64_t session) {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.max_tokens = 8;
    r.session = session;
    return r;
  };
  const std::vector<int32_t> first = prompt(40);  // two full blocks of 16, then 8 tokens
  run(engine, request(first, 7));
  // Another request shares the session's first two blocks through the prefix cache.
  auto other = engine.add_request(request(first, 0));
  engine.step();
  ASSERT_GT(engine.kv().ref_count(0) + engine.kv().ref_count(1), 2);
  // The next turn shares 20 tokens with the session: the cut falls inside the shared second block.
  std::vector<int32_t> next(first.begin(), first.begin() + 20);
  for (int32_t i = 0; i < 10; ++i) next.push_back(400 + i);
  std::vector<int32_t> resumed;
  int64_t reused = -1;
  for (StreamEvent& e : run(engine, request(next, 7))) {
    EXPECT_TRUE(e.error.empty()) << e.error;
    resumed.insert(resumed.end(), e.tokens.begin(), e.tokens.end());
    if (e.finished) reused = e.cached_prompt_tokens;
  }
  EXPECT_EQ(reused, 16);  // from the start of the shared block
  while (engine.step()) {
  }
  LLMEngine fresh(model_->weights, nullptr, LLMEngineOptions{});
  std::vector<int32_t> computed;
  for (StreamEvent& e : run(fresh, request(next, 0))) {
    computed.insert(computed.end(), e.tokens.begin(), e.tokens.end());
  }
  EXPECT_EQ(resumed, computed);
  engine.end_session(7);
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Sequences sharing a prompt prefix in a pool too small for all of them at once: the scheduler
// preempts and readmits, and every request completes with all its tokens. (Waiting sequences
// used to keep the prefix blocks they had matched; with a few of them waiting the pool filled
// with nothing running and the front one failed with "does not fit in the KV cache".)
TEST_F(LLMEngineTest, SharedPrefixesInAFullPoolAllComplete) {
  LLMEngineOptions eo;
  eo.engine.max_context = 128;
  eo.engine.kv_blocks = 12;  // 192 slots for 6 x ~45 tokens
  eo.engine.prefix_caching = true;
  eo.scheduler.max_sequences = 6;
  LLMEngine engine(model_->weights, model_->tokenizer.get(), eo);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.prompt = prompt(8 + i);
    const std::vector<int32_t> again = prompt(8);
    r.prompt.insert(r.prompt.end(), again.begin(), again.end());
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    streams.push_back(engine.add_request(std::move(r)));
  }
  while (engine.step()) {
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    int64_t tokens = 0;
    std::string error;
    while (auto e = streams[i]->pop(std::chrono::milliseconds(0))) {
      tokens += static_cast<int64_t>(e->tokens.size());
      error += e->error;
    }
    EXPECT_EQ(error, "") << "request " << i;
    EXPECT_EQ(tokens, 24) << "request " << i;
  }
  EXPECT_GT(engine.metrics().preemptions_total, 0u);
  EXPECT_EQ(engine.kv().used_blocks(), 0);
}

}  // namespace
}  // namespace ember
