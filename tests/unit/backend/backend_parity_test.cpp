// The seam's proof: the same model and the same batches run on the cpu backend and on the
// reference backend (scalar, double accumulation) give the same logits. f32 weights, so the only
// differences are summation order: within 1e-4 of each row's largest logit, same argmax. A prefill
// step (one chunk of several tokens), then decode steps of one token, through the paged cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

constexpr double kRelativeTolerance = 1e-4;

// Logits of `prompt` (all rows) followed by `decode` single-token steps, greedy.
std::vector<std::vector<float>> run_steps(const ModelWeights& weights,
                                          const std::vector<int32_t>& prompt, int decode) {
  return test::greedy_step_logits(weights, prompt, decode, /*all_logits=*/true);
}

// Logits of `a` and `b` on the same model and steps: within `tolerance` of each row's largest
// logit; same argmax when `same_argmax`.
void expect_backends_agree(LoadOptions o, const std::vector<int32_t>& prompt, int decode,
                           const std::string& a, const std::string& b, double tolerance,
                           bool same_argmax = true) {
  o.load_tokenizer = false;
  o.backend.name = a;
  LoadedModel a_model = load_model(o);
  ASSERT_EQ(a_model.weights.backend->info().name, a);
  const auto a_rows = run_steps(a_model.weights, prompt, decode);
  o.backend.name = b;
  LoadedModel b_model = load_model(o);
  ASSERT_EQ(b_model.weights.backend->info().name, b);
  const auto b_rows = run_steps(b_model.weights, prompt, decode);
  ASSERT_EQ(a_rows.size(), b_rows.size());
  double worst_all = 0;
  for (size_t r = 0; r < a_rows.size(); ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const auto& x = a_rows[r];
    const auto& y = b_rows[r];
    ASSERT_EQ(x.size(), y.size());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
    }
    worst_all = std::max(worst_all, worst / scale);
    EXPECT_LE(worst, tolerance * scale);
    EXPECT_GT(worst, 0.0) << "two backends giving identical bits: is the second one running?";
    if (same_argmax) {
      EXPECT_EQ(std::max_element(x.begin(), x.end()) - x.begin(),
                std::max_element(y.begin(), y.end()) - y.begin());
    }
  }
  std::printf("[ parity ] %s vs %s: worst relative difference %.2e (tolerance %.0e)\n", a.c_str(),
              b.c_str(), worst_all, tolerance);
}

void expect_backends_agree(LoadOptions o, const std::vector<int32_t>& prompt, int decode) {
  ASSERT_EQ(o.dtype.value_or(DType::F32), DType::F32);
  expect_backends_agree(o, prompt, decode, "cpu", "reference", kRelativeTolerance);
}

const std::vector<int32_t> kStoriesPrompt = {1,  403, 407, 261, 378, 434, 267, 339, 365, 272,
                                             30, 405, 289, 263, 360, 285, 398, 416, 271, 300};

TEST(BackendParity, Stories260KCpuMatchesReference) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  expect_backends_agree(o, kStoriesPrompt, 6);
}

TEST(BackendParity, SmolLM2ShapedDummyCpuMatchesReference) {
  auto config = test::fixture("models/smollm2-135m-instruct/config.json");
  EMBER_REQUIRE_FIXTURE(config);
  LoadOptions o;
  o.path = config.string();
  o.dummy = true;
  o.dtype = DType::F32;
  // 18 tokens: the cpu backend's prefill GEMM path (>= 16 tokens) and its decode kernels.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 18; ++i) prompt.push_back(1 + (i * 1103) % 49000);
  expect_backends_agree(o, prompt, 2);
}

// --- cuda against cpu (skipped without a GPU) ---

TEST(BackendParity, Stories260KCudaMatchesCpu) {
  EMBER_REQUIRE_BACKEND("cuda");
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  expect_backends_agree(o, kStoriesPrompt, 6, "cuda", "cpu", kRelativeTolerance);
}

// bf16 weights: prefill multiplies bf16 activations on the tensor cores (the cpu keeps f32), so
// the rows agree to bf16 rounding; random weights leave near-ties, so argmax is not compared.
TEST(BackendParity, SmolLM2ShapedDummyBf16CudaMatchesCpu) {
  EMBER_REQUIRE_BACKEND("cuda");
  auto config = test::fixture("models/smollm2-135m-instruct/config.json");
  EMBER_REQUIRE_FIXTURE(config);
  LoadOptions o;
  o.path = config.string();
  o.dummy = true;
  o.dtype = DType::BF16;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 18; ++i) prompt.push_back(1 + (i * 1103) % 49000);
  expect_backends_agree(o, prompt, 3, "cuda", "cpu", 2e-2, /*same_argmax=*/false);
}

// Greedy generation of 200 tokens from BOS: the same tokens on cuda as on cpu.
TEST(BackendParity, Stories260KGreedyTextIsTheSameOnCudaAndCpu) {
  EMBER_REQUIRE_BACKEND("cuda");
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  auto greedy = [&](const std::string& backend) {
    LoadOptions o;
    o.path = path.string();
    o.load_tokenizer = false;
    o.backend.name = backend;
    LoadedModel model = load_model(o);
    EngineOptions eo;
    eo.max_context = 256;
    test::StepEngine engine(model.weights, eo);
    Sequence seq;
    std::vector<int32_t> out = {1};
    std::span<const float> z = engine.feed(seq, out);
    while (out.size() < 201) {
      const auto next = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
      out.push_back(next);
      z = engine.feed(seq, std::span<const int32_t>(&out.back(), 1));
    }
    engine.release(seq);
    return out;
  };
  EXPECT_EQ(greedy("cuda"), greedy("cpu"));
}

}  // namespace
}  // namespace ember
