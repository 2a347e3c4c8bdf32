// quantize_row_q8_0 / q4_0 / convert_row (GGUF reference rounding and block layout) and the
// f16 / bf16 conversions of core/half.h against known bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "ember/core/quantize.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::random_floats;

float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(KernelsQuantize, Q8_0KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) * 0.25f;  // amax 4 at j = 0
  BlockQ8_0 b;
  quantize_row_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(4.0f / 127.0f));
  const float id = 127.0f / 4.0f;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], static_cast<int8_t>(std::round(x[j] * id))) << j;
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);

  std::vector<float> zeros(32, 0.0f);
  quantize_row_q8_0(zeros.data(), &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);
}

// Integers in [-8, 7] with -8 the largest magnitude: d = -8 / -8 = 1 and quant = value + 8, so
// the nibble layout (byte j = value j | value j+16 << 4) is visible directly.
TEST(KernelsQuantize, Q4_0KnownBlockLayout) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j * 5) % 16 - 8);
  BlockQ4_0 b;
  quantize_row_q4_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3c00);  // 1.0
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>(x[j]) + 8, hi = static_cast<int>(x[j + 16]) + 8;
    EXPECT_EQ(b.qs[j], lo | (hi << 4)) << j;
  }
  // A positive maximum gives a negative scale: +8 maps to quant 0, -8 would need 16 -> clamps.
  for (int j = 0; j < 32; ++j) x[j] = j == 3 ? 8.0f : -8.0f * (j == 5);
  quantize_row_q4_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(-1.0f));
  EXPECT_EQ(b.qs[3] & 0x0f, 0);   // 8 / -1 + 8.5 = 0.5 -> 0
  EXPECT_EQ(b.qs[5] & 0x0f, 15);  // -8 / -1 + 8.5 = 16.5 -> 16 -> clamped to 15
  EXPECT_EQ(b.qs[0] & 0x0f, 8);   // 0 -> 8
}

// Round trip on random rows: |x - d16 q| <= d/2 + |q| |d - d16| for q8_0 (d the float scale,
// d16 the stored f16 scale); q4_0 likewise for unclamped values, and <= |d| + 8 |d - d16| for the
// values clamped at quant 15 (the end opposite the maximum).
TEST(KernelsQuantize, RoundTripErrorBounds) {
  const int64_t n = 32 * 64;
  auto x = random_floats(n, 42, -3.0f, 3.0f);
  for (int64_t i = 0; i < n; i += 97) x[i] *= 10.0f;  // some blocks with outliers
  for (int64_t i = 64; i < 96; ++i) x[i] = 0.0f;      // one all-zero block
  {
    std::vector<BlockQ8_0> q(n / 32);
    quantize_row_q8_0(x.data(), q.data(), n);
    std::vector<float> back(n);
    reference::dequantize_row({DType::Q8_0, q.data(), 1, n, dtype_row_bytes(DType::Q8_0, n)}, 0,
                              back.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const double d = amax / 127.0f, d16 = f16_to_f32(q[b].d);
      for (int j = 0; j < 32; ++j) {
        const double bound = d / 2 + 127 * std::fabs(d - d16) + 1e-6 * d;
        ASSERT_LE(std::fabs(x[b * 32 + j] - back[b * 32 + j]), bound) << b << " " << j;
      }
    }
  }
  {
    std::vector<BlockQ4_0> q(n / 32);
    quantize_row_q4_0(x.data(), q.data(), n);
    std::vector<float> back(n);
    reference::dequantize_row({DType::Q4_0, q.data(), 1, n, dtype_row_bytes(DType::Q4_0, n)}, 0,
                              back.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j) {
        if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(max = x[b * 32 + j]);
      }
      const double d = max / -8.0f, d16 = f16_to_f32(q[b].d);
      for (int j = 0; j < 32; ++j) {
        const double v = x[b * 32 + j];
        const bool clamped = d != 0.0 && v / d > 7.5;
        const double bound =
            (clamped ? std::fabs(d) : std::fabs(d) / 2) + 8 * std::fabs(d - d16) + 1e-6 * amax;
        ASSERT_LE(std::fabs(v - back[b * 32 + j]), bound) << b << " " << j;
      }
    }
  }
}

TEST(KernelsQuantize, ConvertRowMatchesScalarConversions) {
  auto x = random_floats(64, 3, -100.0f, 100.0f);
  std::vector<uint8_t> out(64 * 4);
  convert_row(x.data(), DType::F32, out.data(), 64);
  EXPECT_EQ(std::memcmp(out.data(), x.data(), 64 * 4), 0);
  convert_row(x.data(), DType::F16, out.data(), 64);
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, out.data() + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16(x[i]));
  }
  convert_row(x.data(), DType::BF16, out.data(), 64);
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, out.data() + 2 * i, 2);
    EXPECT_EQ(h, f32_to_bf16(x[i]));
  }
  std::vector<BlockQ8_0> q8(2);
  convert_row(x.data(), DType::Q8_0, out.data(), 64);
  quantize_row_q8_0(x.data(), q8.data(), 64);
  EXPECT_EQ(std::memcmp(out.data(), q8.data(), sizeof(BlockQ8_0) * 2), 0);
  std::vector<BlockQ4_0> q4(2);
  convert_row(x.data(), DType::Q4_0, out.data(), 64);
  quantize_row_q4_0(x.data(), q4.data(), 64);
  EXPECT_EQ(std::memcmp(out.data(), q4.data(), sizeof(BlockQ4_0) * 2), 0);
  EXPECT_THROW(convert_row(x.data(), DType::Q4_0, out.data(), 33), std::runtime_error);
}

TEST(KernelsHalf, F32ToF16KnownBits) {
  struct Case {
    float in;
    uint16_t want;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.1f, 0x2e66},
      {65504.0f, 0x7bff},    // largest half
      {65519.996f, 0x7bff},  // just below the halfway point to 65536
      {65520.0f, 0x7c00},    // halfway, ties to even -> inf
      {1e10f, 0x7c00},
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      {std::ldexp(1.0f, -14), 0x0400},         // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},         // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},         // halfway to 2^-24, ties to even -> 0
      {std::ldexp(1.5f, -25), 0x0001},         // above halfway
      {std::ldexp(3.0f, -25), 0x0002},         // 1.5 * 2^-24: tie between 1 and 2 -> 2
      {std::ldexp(5.0f, -25), 0x0002},         // 2.5 * 2^-24: tie between 2 and 3 -> 2
      {std::ldexp(1023.0f, -24), 0x03ff},      // largest subnormal
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie -> even mantissa 0
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie -> even mantissa 2
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},  // above the tie
  };
  for (const Case& c : cases) EXPECT_EQ(f32_to_f16(c.in), c.want) << c.in;
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(KernelsHalf, F16ToF32KnownValuesAndRoundTrip) {
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_bits(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)) && f16_to_f32(0x7c00) > 0);
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every non-NaN half survives f16 -> f32 -> f16
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(KernelsHalf, Bf16KnownBits) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds up to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00008000)), 0x0000);  // subnormal tie -> even (0)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00018000)), 0x0002);  // subnormal tie -> even (2)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00010001)), 0x0001);  // below halfway
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x80000000)), 0x8000);
  const uint16_t nan = f32_to_bf16(bits_to_f32(0x7f800001));  // a NaN whose payload is low bits
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);  // stays a NaN, not inf
  EXPECT_EQ(f32_bits(bf16_to_f32(0x3f80)), 0x3f800000u);
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every non-NaN bf16 survives the round trip
    if ((h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0) continue;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace ember::cpu
