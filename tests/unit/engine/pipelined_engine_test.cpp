// LLMEngine with steps in flight (--pp's batches in flight, llm_engine_pipelined.cpp), in one
// process: the weights get the hooks a pipeline's last stage has (its logits' hand-off started at
// launch and finished at collect, here with no other rank), so the runner takes two steps at once
// and the engine launches a second batch before it samples the first. Greedy tokens must be those
// of the engine that runs each step whole, with chunked prefill, preemption in a small pool,
// prefix caching and a request cancelled while its batch is in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "ember/engine/llm_engine.h"
#include "ember/engine/scheduler.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

class PipelinedEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = test::fixture("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    LoadOptions o;
    o.path = path.string();
    model_ = std::make_unique<LoadedModel>(load_model(o));
  }

  // A last stage of two whose logits go nowhere: the hand-offs are counted, and how many were
  // started and not yet finished at most.
  void act_as_last_of_two_stages() {
    ModelWeights& w = model_->weights;
    w.pipeline_stages = 2;
    w.start_logits = [this](float*, int64_t) {
      ++started_;
      most_outstanding_ = std::max(most_outstanding_, started_ - finished_);
    };
    w.finish_logits = [this] {
      ASSERT_LT(finished_, started_) << "a hand-off finished that was never started";
      ++finished_;
    };
  }
  void act_as_one_process() {
    ModelWeights& w = model_->weights;
    w.pipeline_stages = 1;
    w.start_logits = nullptr;
    w.finish_logits = nullptr;
  }

  std::vector<int32_t> prompt(int n, int salt) const {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(3 + (i * 37 + salt * 11) % 500);
    return p;
  }

  // The greedy tokens of each request (n requests of different lengths, a shared prefix among
  // them), with `cancel` cancelled after the engine's third step.
  std::vector<std::vector<int32_t>> generate(const LLMEngineOptions& eo, int n, int cancel = -1) {
    LLMEngine engine(model_->weights, nullptr, eo);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.prompt = prompt(6 + 5 * i, i % 3);
      r.max_tokens = 20 + i;
      r.sampling.temperature = 0;
      r.ignore_eos = true;
      streams.push_back(engine.add_request(std::move(r)));
    }
    for (int steps = 0; engine.step(); ++steps) {
      if (steps == 2 && cancel >= 0) streams[static_cast<size_t>(cancel)]->cancel();
    }
    EXPECT_EQ(engine.kv().used_blocks(), 0) << "every block given back";
    preemptions_ = engine.metrics().preemptions_total;
    std::vector<std::vector<int32_t>> out;
    for (const auto& s : streams) {
      std::vector<int32_t> tokens;
      while (auto e = s->pop(std::chrono::milliseconds(0))) {
        EXPECT_EQ(e->error, "");
        tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
      }
      out.push_back(std::move(tokens));
    }
    return out;
  }

  std::unique_ptr<LoadedModel> model_;
  int64_t started_ = 0, finished_ = 0, most_outstanding_ = 0;
  uint64_t preemptions_ = 0;
};

TEST_F(PipelinedEngineTest, BatchesInFlightGiveTheTokensOfWholeSteps) {
  struct Case {
    const char* what;
    int64_t budget, kv_blocks;
    bool prefix_caching;
  };
  for (const Case& c :
       {Case{"roomy pool", 512, 0, false}, Case{"chunked prefill", 7, 0, false},
        Case{"small pool: preemption", 64, 14, false}, Case{"prefix caching", 512, 0, true}}) {
    SCOPED_TRACE(c.what);
    LLMEngineOptions eo;
    eo.engine.max_context = 128;
    eo.engine.kv_blocks = c.kv_blocks;
    eo.engine.prefix_caching = c.prefix_caching;
    eo.engine.pipeline_in_flight = 2;
    eo.scheduler.max_batched_tokens = c.budget;
    eo.scheduler.max_sequences = 6;
    act_as_one_process();
    const auto whole = generate(eo, 6);
    act_as_last_of_two_stages();
    started_ = finished_ = most_outstanding_ = 0;
    const auto in_flight = generate(eo, 6);
    EXPECT_EQ(in_flight, whole);
    for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i].size(), 20 + i);
    EXPECT_EQ(most_outstanding_, 2) << "a second batch was launched before the first was sampled";
    EXPECT_EQ(started_, finished_) << "every hand-off started was finished";
    if (c.kv_blocks > 0) {
      EXPECT_GT(preemptions_, 0u);
    }
  }
}

TEST_F(PipelinedEngineTest, ACancelledRequestInFlightLeavesTheOthersWhole) {
  LLMEngineOptions eo;
  eo.engine.max_context = 128;
  eo.engine.pipeline_in_flight = 2;
  eo.scheduler.max_sequences = 4;
  act_as_one_process();
  const auto whole = generate(eo, 4);
  act_as_last_of_two_stages();
  const auto in_flight = generate(eo, 4, /*cancel=*/1);
  ASSERT_EQ(in_flight.size(), 4u);
  EXPECT_LT(in_flight[1].size(), whole[1].size());
  for (size_t i : {0u, 2u, 3u}) EXPECT_EQ(in_flight[i], whole[i]) << "request " << i;
  EXPECT_EQ(started_, finished_);
}

TEST_F(PipelinedEngineTest, OneBatchInFlightIsTheWholeStepEngine) {
  LLMEngineOptions eo;
  eo.engine.max_context = 128;
  eo.engine.pipeline_in_flight = 1;
  act_as_last_of_two_stages();
  const auto got = generate(eo, 3);
  EXPECT_EQ(most_outstanding_, 1);
  act_as_one_process();
  EXPECT_EQ(got, generate(eo, 3));
}

std::unique_ptr<Sequence> sequence(uint64_t arrival, int64_t n_tokens) {
  auto s = std::make_unique<Sequence>();
  s->arrival = arrival;
  s->tokens.assign(static_cast<size_t>(n_tokens), 7);
  s->n_prompt = n_tokens;
  s->max_tokens = 100;
  return s;
}

// The scheduler's rules for sequences in flight: one whose every token is on its way is not
// scheduled, one with a chunk on its way is never preempted (its logits are still to land), and a
// step takes at most max_chunks sequences.
TEST(SchedulerInFlight, SequencesInFlightAreNeitherScheduledNorPreempted) {
  SchedulerConfig config;
  config.max_batched_tokens = 64;
  Scheduler sched(config, /*n_blocks=*/4, /*block_size=*/4, /*prefix_caching=*/false);
  sched.add(sequence(0, 8));
  sched.add(sequence(1, 8));
  std::vector<std::unique_ptr<Sequence>> failed;
  std::vector<ScheduledChunk> chunks = sched.schedule(failed);
  ASSERT_EQ(chunks.size(), 2u);  // both prompts: the pool's 4 blocks
  for (const ScheduledChunk& c : chunks) sched.commit(c);
  Sequence* older = sched.running()[0].get();
  Sequence* younger = sched.running()[1].get();
  younger->chunks_in_flight = 1;  // its logits are on their way: nothing pending
  older->tokens.push_back(9);     // sampled: its 9th token needs a 3rd block
  chunks = sched.schedule(failed);
  EXPECT_EQ(sched.preemptions(), 1u);
  ASSERT_EQ(chunks.size(), 1u);
  // The older one made room by going back to wait, and is recomputed from the start into the
  // blocks it gave back (8 of its 9 tokens fit there); the one in flight kept its blocks.
  EXPECT_EQ(chunks[0].seq, older);
  EXPECT_EQ(chunks[0].start, 0);
  EXPECT_EQ(chunks[0].n_tokens, 8);
  EXPECT_FALSE(chunks[0].completes);
  ASSERT_EQ(sched.running().size(), 2u);
  EXPECT_EQ(sched.running()[1].get(), younger);
  EXPECT_EQ(younger->block_table.blocks.size(), 2u);
  EXPECT_EQ(younger->n_cached, 8);
  EXPECT_TRUE(failed.empty());
}

TEST(SchedulerInFlight, AStepTakesAtMostMaxChunksSequences) {
  SchedulerConfig config;
  Scheduler sched(config, /*n_blocks=*/64, /*block_size=*/4, /*prefix_caching=*/false);
  for (uint64_t i = 0; i < 5; ++i) sched.add(sequence(i, 6));
  std::vector<std::unique_ptr<Sequence>> failed;
  std::vector<ScheduledChunk> first = sched.schedule(failed, 3);
  ASSERT_EQ(first.size(), 3u);
  for (const ScheduledChunk& c : first) {
    sched.commit(c);
    ++c.seq->chunks_in_flight;
  }
  const std::vector<ScheduledChunk> second = sched.schedule(failed, 3);
  ASSERT_EQ(second.size(), 2u) << "the two still waiting; the three in flight have nothing pending";
  for (const ScheduledChunk& c : second) EXPECT_EQ(c.seq->chunks_in_flight, 0);
}

}  // namespace
}  // namespace ember
