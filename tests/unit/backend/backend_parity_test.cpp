// The seam's proof: the same model and the same batches run on the cpu backend and on the
// reference backend (scalar, double accumulation) give the same logits. f32 weights, so the only
// differences are summation order: within 1e-4 of each row's largest logit, same argmax. A prefill
// step (one chunk of several tokens), then decode steps of one token, through the paged cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <span>
#include <vector>

#include "ember/engine/engine.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

constexpr double kRelativeTolerance = 1e-4;

// Logits of `prompt` (all rows) followed by `decode` single-token steps, greedy.
std::vector<std::vector<float>> run_steps(const ModelWeights& weights,
                                          const std::vector<int32_t>& prompt, int decode) {
  EngineOptions eo;
  eo.max_context = 64;
  Engine engine(weights, eo);
  const auto V = static_cast<size_t>(weights.config.vocab_size);
  std::vector<std::vector<float>> rows;
  Sequence seq;
  std::span<const float> z = engine.feed(seq, prompt, /*all_logits=*/true);
  for (size_t r = 0; r < prompt.size(); ++r)
    rows.emplace_back(z.begin() + r * V, z.begin() + (r + 1) * V);
  for (int i = 0; i < decode; ++i) {
    const auto& last = rows.back();
    const auto next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    z = engine.feed(seq, std::span<const int32_t>(&next, 1));
    rows.emplace_back(z.begin(), z.end());
  }
  engine.release(seq);
  return rows;
}

void expect_backends_agree(LoadOptions o, const std::vector<int32_t>& prompt, int decode) {
  o.load_tokenizer = false;
  o.backend.name = "cpu";
  LoadedModel cpu_model = load_model(o);
  ASSERT_EQ(cpu_model.weights.matrix_dtype(), DType::F32);
  ASSERT_EQ(cpu_model.weights.backend->info().name, "cpu");
  const auto cpu_rows = run_steps(cpu_model.weights, prompt, decode);
  o.backend.name = "reference";
  LoadedModel ref_model = load_model(o);
  ASSERT_EQ(ref_model.weights.backend->info().name, "reference");
  const auto ref_rows = run_steps(ref_model.weights, prompt, decode);
  ASSERT_EQ(cpu_rows.size(), ref_rows.size());
  for (size_t r = 0; r < cpu_rows.size(); ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const auto& a = cpu_rows[r];
    const auto& b = ref_rows[r];
    ASSERT_EQ(a.size(), b.size());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    EXPECT_LE(worst, kRelativeTolerance * scale);
    EXPECT_GT(worst, 0.0) << "two backends giving identical bits: is the reference one running?";
    EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(),
              std::max_element(b.begin(), b.end()) - b.begin());
  }
}

TEST(BackendParity, Stories260KCpuMatchesReference) {
  auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  expect_backends_agree(o, {1,  403, 407, 261, 378, 434, 267, 339, 365, 272,
                            30, 405, 289, 263, 360, 285, 398, 416, 271, 300},
                        6);
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

}  // namespace
}  // namespace ember
