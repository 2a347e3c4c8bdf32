// Sliding-window models (every layer windowed: Phi-3 here, window 12) give the KV blocks their
// windows have passed back to the pool during a long generation: memory stays bounded by the
// window, and the generated tokens are those of an engine that keeps every block (attention never
// reads behind the window, so nothing it reads was given back).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ember/engine/llm_engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

struct Generation {
  std::vector<std::vector<int32_t>> tokens;  // per request
  int64_t peak_used_blocks = 0;
};

Generation generate(const ModelWeights& weights, bool release) {
  LLMEngineOptions lo;
  lo.engine.max_context = 256;
  lo.engine.max_sequences = 2;
  lo.engine.block_size = 4;
  lo.engine.release_window_blocks = release;
  lo.scheduler.max_batched_tokens = 8;  // prompts in chunks: windows across chunk boundaries
  LLMEngine engine(weights, nullptr, lo);
  Generation g;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 2; ++r) {
    GenerationRequest req;
    for (int i = 0; i < 20 + 7 * r; ++i) req.prompt.push_back(3 + (i * 37 + r * 11) % 500);
    req.max_tokens = 150;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    streams.push_back(engine.add_request(std::move(req)));
  }
  g.tokens.resize(streams.size());
  while (engine.step()) {
    g.peak_used_blocks = std::max(g.peak_used_blocks, engine.kv().used_blocks());
    for (size_t r = 0; r < streams.size(); ++r) {
      while (auto e = streams[r]->pop(std::chrono::milliseconds(0))) {
        g.tokens[r].insert(g.tokens[r].end(), e->tokens.begin(), e->tokens.end());
      }
    }
  }
  return g;
}

TEST(SlidingWindow, BlocksBehindTheWindowGoBackToThePool) {
  const auto path = test::fixture("models/family-zoo/phi3.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no family-zoo fixture";
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  const LoadedModel model = load_model(o);
  ASSERT_EQ(model.weights.config.sliding_window, 12);
  const Generation kept = generate(model.weights, /*release=*/false);
  const Generation released = generate(model.weights, /*release=*/true);
  ASSERT_EQ(kept.tokens[0].size(), 150u);
  ASSERT_EQ(kept.tokens[1].size(), 150u);
  EXPECT_EQ(released.tokens, kept.tokens);
  // Keeping every block: (20 + 150) and (27 + 150) positions in blocks of 4.
  EXPECT_GE(kept.peak_used_blocks, 80);
  // Released: per sequence the 12-position window spans at most 4 blocks, plus the block the
  // step writes into and one a chunk may reach into.
  EXPECT_LE(released.peak_used_blocks, 2 * 6);
  std::printf("[ window ] peak KV blocks: %lld kept, %lld released\n",
              static_cast<long long>(kept.peak_used_blocks),
              static_cast<long long>(released.peak_used_blocks));
}

}  // namespace
}  // namespace ember
