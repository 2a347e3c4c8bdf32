// The block quantizers of quantize_row_blocks (every type beyond q8_0/q4_0), round-tripped through
// convert_row and dequantize_row (the format's spec in code):
//   - on the weights of ../shared/models/quant-zoo's f32 model, against llama.cpp's own quantizer:
//     each type's RMSE over the tensors llama.cpp stored in that type must be within 5% of its;
//   - byte-identical output for the same input, whatever the output buffer held before;
//   - edge rows (zeros, constants, one huge outlier, values near the f16 limit, tiny values) give
//     finite values and sane error; rows that are not whole blocks are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/core/quantize.h"
#include "ember/formats/gguf.h"
#include "test_util.h"

namespace ember {
namespace {

constexpr DType kBlockTypes[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1,   DType::Q8_1,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                                 DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};

std::filesystem::path zoo(const std::string& name) {
  return test::fixture("models/quant-zoo/" + name);
}

std::string ggml_name(DType dtype) {
  std::string s = dtype_name(dtype);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<float> random_row(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// x quantized to `dtype` and back.
std::vector<float> round_trip(DType dtype, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(dtype, n)));
  convert_row(x.data(), dtype, q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(dtype, q.data(), y.data(), n);
  return y;
}

double rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(x.size()));
}

double rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (static_cast<double>(x[i]) - y[i]) * (x[i] - y[i]);
  return std::sqrt(s / static_cast<double>(x.size()));
}

bool all_finite(const std::vector<float>& y) {
  return std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); });
}

// ---- Against llama.cpp on the quant-zoo model -------------------------------------------------

struct ZooCase {
  DType dtype;
  std::string file;       // the llama.cpp preset holding tensors of...
  std::string stored_as;  // ...this GGML type (types_by_tensor in reference.json)
};

void PrintTo(const ZooCase& c, std::ostream* os) {
  *os << dtype_name(c.dtype);
}

struct Totals {
  double ours_sse = 0, theirs_sse = 0, worst_tensor_ratio = 0, seconds = 0;
  int64_t values = 0;
  int tensors = 0;
};

// Adds one tensor: its f32 rows quantized by ember vs the same rows as llama.cpp stored them.
void add_tensor(DType dtype, const TensorView& f32, const TensorView& theirs, Totals& t) {
  const int64_t rows = f32.rows(), cols = f32.cols();
  std::vector<float> x(static_cast<size_t>(cols)), ours(x.size()), ref(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(dtype, cols)));
  const int64_t their_row_bytes = dtype_row_bytes(theirs.dtype, cols);
  double ours_sse = 0, theirs_sse = 0, seconds = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(x.data(), f32.data + r * cols * 4, static_cast<size_t>(cols) * 4);
    const auto start = std::chrono::steady_clock::now();
    convert_row(x.data(), dtype, q.data(), cols);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    dequantize_row(dtype, q.data(), ours.data(), cols);
    dequantize_row(theirs.dtype, theirs.data + r * their_row_bytes, ref.data(), cols);
    ASSERT_TRUE(all_finite(ours)) << f32.name << " row " << r;
    for (int64_t i = 0; i < cols; ++i) {
      ours_sse += (static_cast<double>(x[i]) - ours[i]) * (x[i] - ours[i]);
      theirs_sse += (static_cast<double>(x[i]) - ref[i]) * (x[i] - ref[i]);
    }
  }
  t.ours_sse += ours_sse;
  t.theirs_sse += theirs_sse;
  t.worst_tensor_ratio = std::max(t.worst_tensor_ratio, std::sqrt(ours_sse / theirs_sse));
  t.seconds += seconds;
  t.values += rows * cols;
  ++t.tensors;
}

class ZooRoundTrip : public ::testing::TestWithParam<ZooCase> {};

TEST_P(ZooRoundTrip, RmseWithinFivePercentOfLlamaCpps) {
  const ZooCase& c = GetParam();
  EMBER_REQUIRE_FIXTURE(zoo("reference.json"));
  EMBER_REQUIRE_FIXTURE(zoo(c.file));
  std::ifstream in(zoo("reference.json"));
  const nlohmann::json types = nlohmann::json::parse(in)["files"][c.file]["types_by_tensor"];
  const GgufFile f32(zoo("zoo-f32.gguf").string()), theirs(zoo(c.file).string());
  Totals t;
  for (const auto& [name, type] : types.items()) {
    if (type.get<std::string>() != c.stored_as) continue;
    const GgufTensorInfo* a = f32.find_tensor(name);
    const GgufTensorInfo* b = theirs.find_tensor(name);
    ASSERT_TRUE(a != nullptr && b != nullptr) << name;
    ASSERT_EQ(a->dtype, DType::F32) << name;
    ASSERT_EQ(ggml_name(b->dtype), c.stored_as) << name;
    ASSERT_EQ(a->shape, b->shape) << name;
    add_tensor(c.dtype, f32.view(*a), theirs.view(*b), t);
  }
  ASSERT_GT(t.tensors, 0) << "no " << c.stored_as << " tensor in " << c.file;
  const double ours = std::sqrt(t.ours_sse / static_cast<double>(t.values));
  const double theirs_rmse = std::sqrt(t.theirs_sse / static_cast<double>(t.values));
  std::printf(
      "[ quantize ] %-6s ember RMSE %.6g, llama.cpp (%s in %s) %.6g: ratio %.4f (worst tensor "
      "%.4f, %d tensors, %.0f ns/value)\n",
      dtype_name(c.dtype), ours, c.stored_as.c_str(), c.file.c_str(), theirs_rmse,
      ours / theirs_rmse, t.worst_tensor_ratio, t.tensors,
      1e9 * t.seconds / static_cast<double>(t.values));
  EXPECT_LE(ours, 1.05 * theirs_rmse);
}

// q8_1 has no llama.cpp preset of its own; its rule (d = max|x| / 127, round to nearest) is q8_0's,
// so llama.cpp's q8_0 tensors are the yardstick.
INSTANTIATE_TEST_SUITE_P(EveryType, ZooRoundTrip,
                         ::testing::Values(ZooCase{DType::Q4_1, "zoo-q4_1.gguf", "Q4_1"},
                                           ZooCase{DType::Q5_0, "zoo-q5_0.gguf", "Q5_0"},
                                           ZooCase{DType::Q5_1, "zoo-q5_1.gguf", "Q5_1"},
                                           ZooCase{DType::Q8_1, "zoo-q8_0.gguf", "Q8_0"},
                                           ZooCase{DType::Q2_K, "zoo-q2_k.gguf", "Q2_K"},
                                           ZooCase{DType::Q3_K, "zoo-q3_k_s.gguf", "Q3_K"},
                                           ZooCase{DType::Q4_K, "zoo-q4_k_m.gguf", "Q4_K"},
                                           ZooCase{DType::Q5_K, "zoo-q5_k_s.gguf", "Q5_K"},
                                           ZooCase{DType::Q6_K, "zoo-q6_k.gguf", "Q6_K"},
                                           ZooCase{DType::IQ4_NL, "zoo-iq4_nl.gguf", "IQ4_NL"},
                                           ZooCase{DType::IQ4_XS, "zoo-iq4_xs.gguf", "IQ4_XS"}),
                         [](const ::testing::TestParamInfo<ZooCase>& info) {
                           return ggml_name(info.param.dtype);
                         });

// q8_k (no preset stores it): plain rounding with one f32 scale per 256, so every value is within
// half a step (max|x| / 127 / 2) of its own, on the zoo model's weights.
TEST(QuantizeBlocks, Q8_KWithinHalfAStepOnZooWeights) {
  EMBER_REQUIRE_FIXTURE(zoo("zoo-f32.gguf"));
  const GgufFile f32(zoo("zoo-f32.gguf").string());
  for (const GgufTensorInfo& info : f32.tensors()) {
    const TensorView v = f32.view(info);
    if (v.shape.size() != 2) continue;
    std::vector<float> x(static_cast<size_t>(v.numel()));
    std::memcpy(x.data(), v.data, x.size() * 4);
    const std::vector<float> y = round_trip(DType::Q8_K, x);
    for (size_t b = 0; b < x.size(); b += 256) {
      float amax = 0;
      for (size_t i = b; i < b + 256; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = b; i < b + 256; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), 0.5f * amax / 127.0f * 1.0001f) << info.name << " " << i;
      }
    }
  }
}

// ---- Determinism and edge rows ------------------------------------------------------------------

class BlockType : public ::testing::TestWithParam<DType> {};

// Same row -> the same bytes, into a buffer that held zeros or garbage before and at an odd
// address: nothing depends on prior memory, alignment or state.
TEST_P(BlockType, DeterministicBytes) {
  const DType t = GetParam();
  std::vector<float> x = random_row(4 * 256, 7, 0.02f);
  x[300] = 0.5f;  // an outlier block
  const auto n = static_cast<int64_t>(x.size());
  const auto bytes = static_cast<size_t>(dtype_row_bytes(t, n));
  std::vector<uint8_t> a(bytes, 0x00), b(bytes + 1, 0xa5);
  convert_row(x.data(), t, a.data(), n);
  convert_row(x.data(), t, b.data() + 1, n);
  EXPECT_EQ(std::memcmp(a.data(), b.data() + 1, bytes), 0);
}

TEST_P(BlockType, ZerosStayZero) {
  const std::vector<float> y = round_trip(GetParam(), std::vector<float>(512, 0.0f));
  for (float v : y) ASSERT_EQ(v, 0.0f);
}

// A constant is one level times the scale(s), so it comes back to within the f16 rounding of the
// scale(s): 5e-3. Small constants put the super-block types' f16 d among the subnormals (3e-3 on
// q4_k: d = 3e-3 / 15 / 63 = 3e-6, where f16 steps are 6e-8, 2%): 1.5e-2 there.
TEST_P(BlockType, ConstantRowsNearlyExact) {
  for (const float c : {0.5f, -0.37f, 1000.0f, 3e-3f}) {
    const double tolerance = std::fabs(c) < 0.01f ? 1.5e-2 : 5e-3;
    const std::vector<float> y = round_trip(GetParam(), std::vector<float>(512, c));
    for (float v : y) ASSERT_NEAR(v, c, tolerance * std::fabs(c)) << c;
  }
}

// One value of 1e4 among values of at most 1e-3: it comes back within 1%, and the small values do
// not blow up. Those of other blocks stay within 2.5e-3 (they flush to zero or the block's
// offset); those of its own block (32 values) too where the type has a level at 0. iq4's grid has
// none (its levels nearest 0 are 1 and -10), so there they come back as +-scale, about 1e4 / 113.
TEST_P(BlockType, OneHugeOutlier) {
  const DType t = GetParam();
  std::vector<float> x = random_row(512, 11, 1e-3f);
  for (float& v : x) v = std::clamp(v, -1e-3f, 1e-3f);
  x[37] = 1e4f;
  const std::vector<float> y = round_trip(t, x);
  ASSERT_TRUE(all_finite(y));
  EXPECT_NEAR(y[37], 1e4f, 100.0f);
  const bool no_zero_level = t == DType::IQ4_NL || t == DType::IQ4_XS;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i == 37) continue;
    const double bound = no_zero_level && i / 32 == 37 / 32 ? 1e4 / 100 : 2.5e-3;
    ASSERT_LE(std::fabs(x[i] - y[i]), bound) << i;
  }
}

// The relative RMSE of a bell-shaped row at scale 1 bounds the type's error on the edge rows.
double relative_rmse(DType t, const std::vector<float>& x) {
  return rmse(x, round_trip(t, x)) / rms(x);
}

// Values up to the f16 limit: no stored scale or offset overflows to infinity, and the error is
// relatively what it is at scale 1.
TEST_P(BlockType, NearF16Limit) {
  const DType t = GetParam();
  const std::vector<float> unit = random_row(1024, 5, 1.0f);
  std::vector<float> x = unit;
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  for (float& v : x) v *= 65504.0f / amax;
  x[3] = 65504.0f, x[700] = -65504.0f;
  const std::vector<float> y = round_trip(t, x);
  ASSERT_TRUE(all_finite(y));
  const double at_unit = relative_rmse(t, unit), at_limit = rmse(x, y) / rms(x);
  std::printf("[ quantize ] %-6s relative RMSE %.5f at scale 1, %.5f at the f16 limit\n",
              dtype_name(t), at_unit, at_limit);
  EXPECT_LE(at_limit, 1.1 * at_unit + 1e-3);
  EXPECT_LE(at_unit, 0.5);
}

// Values of 1e-6 put the f16 scales of the finer types among f16's subnormals (or below them):
// precision is lost, but the values stay finite and never come back further off than zero would.
TEST_P(BlockType, TinyValues) {
  const std::vector<float> x = random_row(1024, 9, 1e-6f);
  const std::vector<float> y = round_trip(GetParam(), x);
  ASSERT_TRUE(all_finite(y));
  EXPECT_LE(rmse(x, y), rms(x));
}

TEST_P(BlockType, RefusesPartialBlocks) {
  const DType t = GetParam();
  const int64_t block = dtype_block_elems(t);
  for (const int64_t n : {block + 16, block / 2, 3 * block - 1}) {
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    std::vector<uint8_t> out(static_cast<size_t>(dtype_block_bytes(t) * 4));
    EXPECT_THROW(dtype_row_bytes(t, n), Error) << n;
    EXPECT_THROW(convert_row(x.data(), t, out.data(), n), Error) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryType, BlockType, ::testing::ValuesIn(kBlockTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return ggml_name(info.param);
                         });

}  // namespace
}  // namespace ember
