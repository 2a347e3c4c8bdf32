#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ember/engine/sampling/sampler.h"

namespace ember {
namespace {

std::vector<float> random_logits(int32_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = scale * (static_cast<float>(gen() % 20001) / 10000.0f - 1.0f);
  return v;
}

SamplingParams no_filters(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

std::vector<int32_t> draw_sequence(const SamplingParams& p, const std::vector<float>& logits,
                                   int n) {
  Sampler s(p, static_cast<int32_t>(logits.size()));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits, {}));
  return out;
}

TEST(Sampler, ArgmaxTiesGoToLowestIndex) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{5, 1, 5, 5}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-2, -1, -1}), 1);
  EXPECT_EQ(argmax(std::vector<float>{7}), 0);
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto logits = random_logits(1000, seed);
    Sampler s(p, 1000);
    EXPECT_EQ(s.sample(logits, {}), argmax(logits));
  }
  std::vector<float> tied(50, 0.0f);
  tied[7] = tied[31] = 2.0f;
  Sampler s(p, 50);
  EXPECT_EQ(s.sample(tied, {}), 7);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDiffers) {
  const auto logits = random_logits(500, 1, 1.0f);
  SamplingParams p = no_filters(1.0f);
  p.seed = 1234;
  const auto a = draw_sequence(p, logits, 200);
  const auto b = draw_sequence(p, logits, 200);
  EXPECT_EQ(a, b);
  p.seed = 4321;
  const auto c = draw_sequence(p, logits, 200);
  EXPECT_NE(a, c);
  // The default chain (top-k 40, top-p, min-p) is deterministic too.
  SamplingParams d;
  EXPECT_EQ(draw_sequence(d, logits, 100), draw_sequence(d, logits, 100));
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  for (float t : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SamplingParams p = no_filters(t);
    p.top_k = 1;
    for (uint32_t seed = 0; seed < 10; ++seed) {
      const auto logits = random_logits(300, seed);
      p.seed = seed;
      for (int32_t tok : draw_sequence(p, logits, 20)) EXPECT_EQ(tok, argmax(logits));
    }
  }
}

TEST(Sampler, TinyTopPIsArgmax) {
  SamplingParams p = no_filters(2.0f);
  p.top_p = 1e-6f;
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const auto logits = random_logits(300, seed);
    for (int32_t tok : draw_sequence(p, logits, 20)) EXPECT_EQ(tok, argmax(logits));
  }
  p.top_k = 40;  // same with top-k in front
  const auto logits = random_logits(300, 99);
  for (int32_t tok : draw_sequence(p, logits, 20)) EXPECT_EQ(tok, argmax(logits));
}

TEST(Sampler, TopPKeepsSmallestSetReachingMass) {
  // probabilities ~ 0.5, 0.25, 0.125, 0.125: top_p 0.7 keeps exactly the first two.
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p = no_filters(1.0f);
  p.top_p = 0.7f;
  int counts[4] = {0, 0, 0, 0};
  for (int32_t tok : draw_sequence(p, logits, 3000)) ++counts[tok];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[0], counts[1]);
  EXPECT_GT(counts[1], 0);
}

TEST(Sampler, MinPFilters) {
  // p ~ 0.6, 0.3, 0.06, 0.04: min_p 0.2 keeps p >= 0.12, i.e. tokens 0 and 1 only.
  const std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.06f),
                                     std::log(0.04f)};
  SamplingParams p = no_filters(1.0f);
  p.min_p = 0.2f;
  int counts[4] = {0, 0, 0, 0};
  for (int32_t tok : draw_sequence(p, logits, 3000)) ++counts[tok];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 0);
  // Without min-p all four appear.
  int all[4] = {0, 0, 0, 0};
  for (int32_t tok : draw_sequence(no_filters(1.0f), logits, 3000)) ++all[tok];
  EXPECT_GT(all[2], 0);
  EXPECT_GT(all[3], 0);
  // min_p above 1 still keeps the most likely token.
  p.min_p = 5.0f;
  for (int32_t tok : draw_sequence(p, logits, 50)) EXPECT_EQ(tok, 0);
}

TEST(Sampler, RepetitionPenaltyLowersRepeatedTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 4;
  // Positive logit: 3 / 2 = 1.5 < 2 -> token 1 wins instead of 0.
  {
    const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
    Sampler s(p, 3);
    EXPECT_EQ(s.sample(logits, {}), 0);
    const std::vector<int32_t> history = {0, 0, 0};  // counted once: 3 / 2, not 3 / 8
    EXPECT_EQ(s.sample(logits, history), 1);
    const std::vector<float> close = {3.0f, 1.4f, 0.0f};
    EXPECT_EQ(s.sample(close, history), 0);
  }
  // Negative logits: -1 * 2 = -2 < -1.5 -> token 1 wins instead of 0.
  {
    const std::vector<float> logits = {-1.0f, -1.5f, -9.0f};
    Sampler s(p, 3);
    EXPECT_EQ(s.sample(logits, {}), 0);
    const std::vector<int32_t> history = {0};
    EXPECT_EQ(s.sample(logits, history), 1);
  }
  // Only the last repeat_last_n tokens count.
  {
    const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
    Sampler s(p, 3);
    const std::vector<int32_t> old = {0, 2, 2, 2, 2};
    EXPECT_EQ(s.sample(logits, old), 0);
  }
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f};
  const size_t n = logits.size();
  std::vector<double> expected(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += expected[i] = std::exp(logits[i]);
  for (double& e : expected) e /= sum;

  const int draws = 200000;
  std::vector<int> counts(n, 0);
  for (int32_t tok : draw_sequence(no_filters(1.0f), logits, draws)) ++counts[tok];
  for (size_t i = 0; i < n; ++i) {
    const double freq = static_cast<double>(counts[i]) / draws;
    EXPECT_NEAR(freq, expected[i], 0.03 * expected[i] + 0.002) << "token " << i;
  }
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  // p(token 0) = sigmoid(1 / T).
  for (float t : {0.5f, 2.0f}) {
    const int draws = 50000;
    int zeros = 0;
    for (int32_t tok : draw_sequence(no_filters(t), logits, draws)) zeros += tok == 0;
    const double expected = 1.0 / (1.0 + std::exp(-1.0 / t));
    EXPECT_NEAR(static_cast<double>(zeros) / draws, expected, 0.015) << "T=" << t;
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// logit_bias shifts a token's logit before everything else; a banned token (min_tokens holding
// back EOS) is never drawn, greedy or sampled, whatever its bias.
TEST(Sampler, LogitBiasAndBannedTokens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logit_bias = {{3, 100.0f}};
  Sampler g(greedy, 4);
  EXPECT_EQ(g.sample(logits, {}), 3);
  const int32_t banned[] = {3, 0};
  EXPECT_EQ(g.sample(logits, {}, 0, banned), 1);
  SamplingParams warm;
  warm.temperature = 1.0f;
  warm.top_k = 0;
  warm.top_p = 1.0f;
  warm.min_p = 0.0f;
  warm.logit_bias = {{0, -100.0f}};
  Sampler s(warm, 4);
  int counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 20000; ++i) ++counts[s.sample(logits, {}, 0, std::span(banned, 1))];
  EXPECT_EQ(counts[0], 0);  // -100: e^-98 against the others
  EXPECT_EQ(counts[3], 0);  // banned
  // The rest keep their softmax ratio: p(1) / p(2) = e.
  EXPECT_NEAR(static_cast<double>(counts[1]) / counts[2], std::exp(1.0), 0.15);
}

}  // namespace
}  // namespace ember
