// --dtype quantize-on-load with ember's own block quantizers: ../shared/models/quant-zoo's f32
// model loaded with LoadOptions.dtype = each block type (every matrix quantized by convert_row,
// the embedding and the output matrix included), run over reference.json's 16 tokens (a prefill of
// 12, then 4 decode steps) on the cpu backend, its logits held to the f32 model's exact answer
// (zoo-f32.f64ref.f32).
//
// Tolerance, relative to the largest |logit| of the exact answer at each position: what this
// quantization moves the model by (a property of the type's bits) plus the backend's 8-bit
// activations (~1e-2). reference.json's vs_f32_max_rel_err is the same measure for llama.cpp's
// presets (Q6_K 0.034, Q5_K_S 0.058, Q4_K_M 0.10, IQ4_XS 0.11, Q4_1 0.13, Q3_K_S 0.23, Q2_K 0.40),
// but those keep the output matrix at Q6_K (and some others at more bits), which here takes the
// type too: q4_0, whose rounding is llama.cpp's byte for byte, measures 0.19 this way against its
// preset's 0.125. `measured` is this test's worst position on this machine (AVX2, the reference
// backend gives the same); the bound is that plus ~30%, so a quantizer that got worse fails while
// summation-order noise passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

constexpr int kPrefill = 12;

std::filesystem::path zoo(const std::string& name) {
  return test::fixture("models/quant-zoo/" + name);
}

// zoo-f32.gguf with every matrix quantized to `dtype` on load: all 16 positions' logits.
std::vector<std::vector<float>> run_quantized(DType dtype, const std::vector<int32_t>& ids) {
  LoadOptions o;
  o.path = zoo("zoo-f32.gguf").string();
  o.load_tokenizer = false;
  o.dtype = dtype;
  o.backend.name = "cpu";
  LoadedModel model = load_model(o);
  EXPECT_EQ(model.weights.matrix_dtype(), dtype);
  EXPECT_EQ(model.weights.lm_head.dtype, dtype);
  EngineOptions eo;
  eo.max_context = 64;
  test::StepEngine engine(model.weights, eo);
  const auto V = static_cast<size_t>(model.weights.config.vocab_size);
  std::vector<std::vector<float>> rows;
  Sequence seq;
  std::span<const int32_t> all(ids);
  std::span<const float> z = engine.feed(seq, all.first(kPrefill), /*all_logits=*/true);
  for (int r = 0; r < kPrefill; ++r) rows.emplace_back(z.begin() + r * V, z.begin() + (r + 1) * V);
  for (size_t i = kPrefill; i < ids.size(); ++i) {
    z = engine.feed(seq, all.subspan(i, 1));
    rows.emplace_back(z.begin(), z.end());
  }
  engine.release(seq);
  return rows;
}

// max over positions of max|ours - exact| / max|exact|.
double worst_relative_error(const std::vector<std::vector<float>>& rows,
                            const std::vector<float>& exact) {
  const size_t V = rows[0].size();
  double worst_rel = 0;
  for (size_t p = 0; p < rows.size(); ++p) {
    double scale = 0, worst = 0;
    for (size_t i = 0; i < V; ++i) {
      const double e = exact[p * V + i];
      scale = std::max(scale, std::fabs(e));
      worst = std::max(worst, std::fabs(rows[p][i] - e));
    }
    worst_rel = std::max(worst_rel, worst / scale);
  }
  return worst_rel;
}

struct OnLoadCase {
  DType dtype;
  double measured;  // worst relative error seen here
  double bound;
};

void PrintTo(const OnLoadCase& c, std::ostream* os) {
  *os << dtype_name(c.dtype);
}

class QuantizeOnLoad : public ::testing::TestWithParam<OnLoadCase> {};

TEST_P(QuantizeOnLoad, LogitsNearTheF32Model) {
  const OnLoadCase& c = GetParam();
  EMBER_REQUIRE_FIXTURE(zoo("reference.json"));
  std::ifstream in(zoo("reference.json"));
  const auto ids = nlohmann::json::parse(in)["token_ids"].get<std::vector<int32_t>>();
  const std::vector<float> exact = test::read_f32_file(zoo("zoo-f32.f64ref.f32"));
  const auto rows = run_quantized(c.dtype, ids);
  ASSERT_EQ(rows.size() * rows[0].size(), exact.size());
  const double rel = worst_relative_error(rows, exact);
  std::printf(
      "[ on-load ] --dtype %-6s max rel err vs the f32 model's exact logits %.5f "
      "(measured %.4f, bound %.3f)\n",
      dtype_name(c.dtype), rel, c.measured, c.bound);
  EXPECT_LE(rel, c.bound);
}

INSTANTIATE_TEST_SUITE_P(
    EveryBlockType, QuantizeOnLoad,
    ::testing::Values(OnLoadCase{DType::Q4_1, 0.2011, 0.26}, OnLoadCase{DType::Q5_0, 0.0953, 0.125},
                      OnLoadCase{DType::Q5_1, 0.0907, 0.12}, OnLoadCase{DType::Q8_1, 0.0168, 0.022},
                      OnLoadCase{DType::Q2_K, 0.5418, 0.70}, OnLoadCase{DType::Q3_K, 0.3813, 0.50},
                      OnLoadCase{DType::Q4_K, 0.2414, 0.32}, OnLoadCase{DType::Q5_K, 0.1010, 0.13},
                      OnLoadCase{DType::Q6_K, 0.0397, 0.052},
                      OnLoadCase{DType::Q8_K, 0.0202, 0.027},
                      OnLoadCase{DType::IQ4_NL, 0.1835, 0.24},
                      OnLoadCase{DType::IQ4_XS, 0.1839, 0.24}),
    [](const ::testing::TestParamInfo<OnLoadCase>& info) {
      return std::string(dtype_name(info.param.dtype));
    });

}  // namespace
}  // namespace ember
