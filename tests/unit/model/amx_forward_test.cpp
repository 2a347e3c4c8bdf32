// A whole forward pass on the AMX kernel set against the AVX-512 one (the acceptance of the AMX
// work: logits equal within the bf16 tolerance the kernel tests use), on a small dummy Llama with
// head_dim 32 so that prefill takes every tile path: bf16 weights packed into AmxTiles at load,
// q8_0 / q4_0 widened per step, attention on tiles over a bf16 cache. And decode on the AMX set
// (the AVX-512 kernels on the tiles) stays within the same tolerance of its prefill. Skips without
// usable AMX, naming what is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ember/backend/cpu/kernels.h"
#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/engine/step_engine.h"
#include "unit/model/dummy_model_util.h"

namespace ember {
namespace {

constexpr char kConfig[] = R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
    "tie_word_embeddings": false, "torch_dtype": "float32"})";

LoadedModel load(DType dtype) {
  return test::load_dummy_model("amx-forward", kConfig, dtype);
}

std::vector<int32_t> prompt() {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back((i * 53 + 7) % 300);
  return tokens;
}

// Logits of every prompt token (one prefill) under `isa`, with the model loaded under it (the
// weight layout is chosen at load).
std::vector<float> prefill_logits(cpu::Isa isa, DType dtype, bool expect_tiles) {
  test::IsaScope scope(isa);
  LoadedModel m = load(dtype);
  if (dtype == DType::BF16) {
    EXPECT_EQ(m.weights.layers[0].wq.layout == WeightLayout::AmxTiles, expect_tiles);
  }
  EngineOptions eo;
  eo.kv_dtype = DType::BF16;
  test::StepEngine engine(m.weights, eo);
  Sequence seq;
  const auto tokens = prompt();
  auto z = engine.feed(seq, tokens, /*all_logits=*/true);
  return {z.begin(), z.end()};
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double{std::fabs(x)});
  return m;
}

TEST(AmxForward, LogitsMatchTheAvx512Path) {
  EMBER_REQUIRE_AMX();
  for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto avx512 = prefill_logits(cpu::Isa::Avx512, dtype, false);
    const auto amx = prefill_logits(cpu::Isa::Amx, dtype, true);
    ASSERT_EQ(avx512.size(), amx.size());
    double worst = 0;
    for (size_t i = 0; i < amx.size(); ++i) {
      worst = std::max(worst, double{std::fabs(amx[i] - avx512[i])});
    }
    // bf16 activations (and, for q8_0 / q4_0, bf16 instead of 8-bit ones): a few 2^-9 relative
    // errors per product through two layers.
    EXPECT_LE(worst, 2e-2 * max_abs(avx512)) << "max |amx - avx512| " << worst;
    EXPECT_GT(worst, 0.0);  // the AMX kernels did run
  }
}

// Decode on the AMX set (the AVX-512 kernels reading the tiles) against its own prefill.
TEST(AmxForward, DecodeStaysWithinToleranceOfPrefill) {
  EMBER_REQUIRE_AMX();
  test::IsaScope scope(cpu::Isa::Amx);
  LoadedModel m = load(DType::BF16);
  EngineOptions eo;
  eo.kv_dtype = DType::BF16;
  test::StepEngine engine(m.weights, eo);
  const auto tokens = prompt();
  const auto V = static_cast<size_t>(m.weights.config.vocab_size);
  Sequence whole, stepwise;
  auto z = engine.feed(whole, tokens, /*all_logits=*/true);
  const std::vector<float> prefill(z.begin(), z.end());
  const double scale = max_abs(prefill);
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto row = engine.feed(stepwise, std::span<const int32_t>(&tokens[t], 1));
    for (size_t i = 0; i < V; ++i) {
      ASSERT_NEAR(row[i], prefill[t * V + i], 2e-2 * scale) << "token " << t << " logit " << i;
    }
  }
}

}  // namespace
}  // namespace ember
