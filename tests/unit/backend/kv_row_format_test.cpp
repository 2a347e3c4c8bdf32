// The KV row formats (backend/kv_row_format.h): sizes, GGUF's q8_0/q4_0 block bits for groups of
// 32, smaller groups for small head_dims, the error bound of each quantized form, exact reads, and
// the dtypes refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ember/backend/kv_row_format.h"
#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/core/quantize.h"

namespace ember {
namespace {

std::vector<float> random_row(int64_t n, uint32_t seed, float range = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = u(rng);
  return x;
}

TEST(KvRowFormat, SizesAndGroups) {
  EXPECT_EQ(kv_quant_group(64), 32);
  EXPECT_EQ(kv_quant_group(96), 32);
  EXPECT_EQ(kv_quant_group(80), 16);
  EXPECT_EQ(kv_quant_group(8), 8);
  EXPECT_EQ(kv_quant_group(20), 0);
  EXPECT_EQ(kv_row_bytes(DType::F32, 64), 256);
  EXPECT_EQ(kv_row_bytes(DType::F16, 64), 128);
  EXPECT_EQ(kv_row_bytes(DType::BF16, 64), 128);
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 64), 68);   // 2 x (2 + 32)
  EXPECT_EQ(kv_row_bytes(DType::Q4_0, 128), 72);  // 4 x (2 + 16)
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 80), 90);   // 5 x (2 + 16)
  EXPECT_EQ(kv_row_bytes(DType::Q4_0, 8), 6);     // 2 + 4
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(DType::Q8_0, 128), 34.0 / 32.0);
  EXPECT_TRUE(kv_dtype_problem(DType::Q8_0, 64).empty());
  EXPECT_NE(kv_dtype_problem(DType::Q8_0, 20).find("multiple of 8"), std::string::npos);
  EXPECT_NE(kv_dtype_problem(DType::Q4_K, 64).find("q4_k"), std::string::npos);
  EXPECT_THROW(kv_row_bytes(DType::Q4_0, 20), Error);
  EXPECT_THROW(kv_row_bytes(DType::IQ4_XS, 256), Error);
  EXPECT_TRUE(kv_dtype_problem(DType::F16, 20).empty());  // float rows take any head_dim
}

// Groups of 32 are GGUF's blocks, bit for bit.
TEST(KvRowFormat, GroupsOf32AreGgufBlocks) {
  const auto x = random_row(128, 1);
  std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(DType::Q8_0, 128)));
  std::vector<BlockQ8_0> q8(4);
  kv_write_row(x.data(), 128, DType::Q8_0, row.data());
  quantize_row_q8_0(x.data(), q8.data(), 128);
  EXPECT_EQ(std::memcmp(row.data(), q8.data(), row.size()), 0);
  std::vector<uint8_t> row4(static_cast<size_t>(kv_row_bytes(DType::Q4_0, 128)));
  std::vector<BlockQ4_0> q4(4);
  kv_write_row(x.data(), 128, DType::Q4_0, row4.data());
  quantize_row_q4_0(x.data(), q4.data(), 128);
  EXPECT_EQ(std::memcmp(row4.data(), q4.data(), row4.size()), 0);
}

// Reading back: within half a quantization step of every value (q8_0 step max|x| / 127 of the
// group; q4_0 step max|x| / 8, a whole step at the clamped end; plus the f16 rounding of the
// scale), exact for f32, f16/bf16 rounding for the half types; zero rows and constant rows come
// back exactly.
TEST(KvRowFormat, ReadBackWithinHalfAStep) {
  for (int64_t hd : {8, 16, 64, 80, 128}) {
    const auto x = random_row(hd, static_cast<uint32_t>(hd));
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " hd " + std::to_string(hd));
      std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(dtype, hd)));
      std::vector<float> back(static_cast<size_t>(hd));
      kv_write_row(x.data(), hd, dtype, row.data());
      kv_read_row(row.data(), hd, dtype, back.data());
      const int64_t g = kv_quant_group(hd);
      for (int64_t i = 0; i < hd; ++i) {
        double amax = 0.0;
        for (int64_t j = i / g * g; j < (i / g + 1) * g; ++j)
          amax = std::max(amax, std::fabs(double(x[j])));
        double bound = 0.0;
        switch (dtype) {
          case DType::F16:
            bound = std::fabs(x[i]) * 0x1p-11;
            break;
          case DType::BF16:
            bound = std::fabs(x[i]) * 0x1p-8;
            break;
          case DType::Q8_0:
            bound = amax / 127.0 * (0.5 + 1e-3) + amax * 0x1p-11;
            break;
          // The end opposite the max magnitude clamps at +7 steps: up to a whole step off.
          case DType::Q4_0:
            bound = amax / 8.0 * (1.0 + 1e-3) + amax * 0x1p-10;
            break;
          default:
            break;
        }
        ASSERT_LE(std::fabs(double(back[i]) - x[i]), bound) << i;
      }
    }
  }
  for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
    std::vector<float> zeros(64, 0.0f), back(64);
    std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(dtype, 64)));
    kv_write_row(zeros.data(), 64, dtype, row.data());
    kv_read_row(row.data(), 64, dtype, back.data());
    EXPECT_EQ(back, zeros);
  }
  // q4_0's scale of a constant row -1.5 is 1.5 / 8 = 0.1875, exact in f16: the row comes back
  // exactly (q8_0's 1.5 / 127 is rounded to f16, so its constant rows come back within the bound).
  std::vector<float> constant(64, -1.5f), back(64);
  std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(DType::Q4_0, 64)));
  kv_write_row(constant.data(), 64, DType::Q4_0, row.data());
  kv_read_row(row.data(), 64, DType::Q4_0, back.data());
  EXPECT_EQ(back, constant);
}

// The nibble layout of a small group: byte j holds value j (low) and value j + g/2 (high).
TEST(KvRowFormat, Q4GroupOf8Layout) {
  const float x[8] = {-8, -4, 0, 4, 7, 2, -2, 1};  // d = -8 / -8 = 1: quants x + 8
  uint8_t row[6];
  kv_write_row(x, 8, DType::Q4_0, row);
  uint16_t d;
  std::memcpy(&d, row, 2);
  EXPECT_EQ(f16_to_f32(d), 1.0f);
  EXPECT_EQ(row[2], (0) | (15 << 4));  // -8 -> 0, 7 -> 15
  EXPECT_EQ(row[3], (4) | (10 << 4));  // -4 -> 4, 2 -> 10
  EXPECT_EQ(row[4], (8) | (6 << 4));   // 0 -> 8, -2 -> 6
  EXPECT_EQ(row[5], (12) | (9 << 4));  // 4 -> 12, 1 -> 9
  float back[8];
  kv_read_row(row, 8, DType::Q4_0, back);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(back[i], x[i]);
}

}  // namespace
}  // namespace ember
