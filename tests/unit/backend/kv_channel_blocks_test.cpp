// Per-channel K blocks (backend/kv_channel_blocks.h): sizes, the byte layout, the rounding, and
// why they exist: a K block whose channels differ in size by 100x keeps every channel's values,
// where q4_0's per-token groups lose the small channels.
#include "ember/backend/kv_channel_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ember/backend/kv_row_format.h"
#include "ember/core/half.h"

namespace ember {
namespace {

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_f16(x[i]);
  return h;
}

TEST(KvChannelBlocks, SizesAndProblems) {
  EXPECT_EQ(kv_channel_row_bytes(64, 16), 48);  // 32 codes + (256 bytes of scales) / 16
  EXPECT_EQ(kv_channel_row_bytes(8, 16), 6);    // 4 + 32 / 16
  EXPECT_EQ(kv_channel_row_bytes(8, 5), 12);    // 4 + ceil(32 / 5) = 11, rounded up to even
  EXPECT_EQ(kv_channel_row_bytes(128, 32), 80);
  EXPECT_TRUE(kv_channel_problem(DType::Q4_0, 64, 16).empty());
  EXPECT_NE(kv_channel_problem(DType::Q8_0, 64, 16).find("q4_0"), std::string::npos);
  EXPECT_NE(kv_channel_problem(DType::Q4_0, 20, 16).find("multiple of 8"), std::string::npos);
  EXPECT_NE(kv_channel_problem(DType::Q4_0, 64, 1).find("2 tokens"), std::string::npos);
}

// Two channels of 4 rows by hand (head_dim 8: channels 0..3 in low nibbles, 4..7 in high ones).
TEST(KvChannelBlocks, LayoutIsScaleMinThenNibbleRows) {
  const int64_t hd = 8, bs = 4;
  std::vector<float> x(static_cast<size_t>(hd * bs), 0.0f);
  for (int64_t r = 0; r < bs; ++r) {
    x[static_cast<size_t>(r * hd + 0)] = -1.0f + 1.0f * static_cast<float>(r);  // -1, 0, 1, 2
    x[static_cast<size_t>(r * hd + 5)] = 3.0f * static_cast<float>(r);          // 0, 3, 6, 9
  }
  std::vector<uint8_t> region(static_cast<size_t>(bs * kv_channel_row_bytes(hd, bs)), 0xAA);
  kv_channel_quantize(to_f16(x).data(), hd, bs, region.data());
  uint16_t scale[8], min[8];
  std::memcpy(scale, region.data(), 16);
  std::memcpy(min, region.data() + 16, 16);
  EXPECT_EQ(f16_to_f32(min[0]), -1.0f);
  EXPECT_EQ(f16_to_f32(scale[0]), f16_to_f32(f32_to_f16(3.0f / 15.0f)));
  EXPECT_EQ(f16_to_f32(min[5]), 0.0f);
  EXPECT_EQ(f16_to_f32(scale[5]), f16_to_f32(f32_to_f16(9.0f / 15.0f)));
  EXPECT_EQ(scale[1], 0);  // a constant channel: scale 0, its value is the minimum
  const uint8_t* codes = region.data() + 4 * hd;
  // Row 3: channel 0 is 2 = -1 + 15 * 0.2 (code 15, low nibble of byte 0); channel 5 is 9 (code
  // 15, high nibble of byte 1).
  EXPECT_EQ(codes[3 * 4 + 0] & 0x0F, 15);
  EXPECT_EQ(codes[3 * 4 + 1] >> 4, 15);
  EXPECT_EQ(codes[0] & 0x0F, 0);  // row 0, channel 0: the minimum
  float back[8];
  kv_channel_read_row(region.data(), 1, hd, bs, back);
  EXPECT_NEAR(back[0], 0.0f, 0.1f);
  EXPECT_NEAR(back[5], 3.0f, 0.3f);
  EXPECT_EQ(back[1], 0.0f);
}

// head_dim 16: two code columns of 4-byte words, block_size words each; channel c of the low half
// and channel c + 8 share byte c % 4 of column c / 4's word for the row.
TEST(KvChannelBlocks, CodesAreColumnsOfFourByteWords) {
  const int64_t hd = 16, bs = 4;
  std::vector<float> x(static_cast<size_t>(hd * bs), 0.0f);
  for (int64_t r = 0; r < bs; ++r) {
    for (int64_t c = 0; c < hd; ++c) {
      x[static_cast<size_t>(r * hd + c)] = static_cast<float>((r + c) % 4);  // codes 0, 5, 10, 15
    }
  }
  std::vector<uint8_t> region(static_cast<size_t>(bs * kv_channel_row_bytes(hd, bs)), 0xAA);
  kv_channel_quantize(to_f16(x).data(), hd, bs, region.data());
  const uint8_t* codes = kv_channel_codes(region.data(), hd);
  for (int64_t r = 0; r < bs; ++r) {
    for (int64_t c = 0; c < hd; ++c) {
      const int want = 5 * static_cast<int>((r + c) % 4);
      const int64_t lane = c % 8;  // half = 8
      const uint8_t byte = codes[4 * (lane / 4 * bs + r) + lane % 4];
      EXPECT_EQ(c < 8 ? byte & 0x0F : byte >> 4, want) << r << " " << c;
      EXPECT_EQ(kv_channel_code(region.data(), r, c, hd, bs), want) << r << " " << c;
    }
  }
}

// Every value within half a step of its channel (plus the f16 rounding of scale and minimum), and
// a channel 100x smaller than its neighbours keeps its values: q4_0's per-token groups round it
// to 0.
TEST(KvChannelBlocks, EachChannelKeepsItsOwnRange) {
  const int64_t hd = 64, bs = 16;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(hd * bs));
  for (int64_t r = 0; r < bs; ++r) {
    for (int64_t c = 0; c < hd; ++c) {
      const float size = c % 8 == 0 ? 100.0f : 1.0f;  // outlier channels, as K has
      x[static_cast<size_t>(r * hd + c)] = size * u(rng) + (c == 3 ? 50.0f : 0.0f);
    }
  }
  const std::vector<uint16_t> h = to_f16(x);
  std::vector<uint8_t> region(static_cast<size_t>(bs * kv_channel_row_bytes(hd, bs)));
  kv_channel_quantize(h.data(), hd, bs, region.data());
  std::vector<uint8_t> q4(static_cast<size_t>(kv_row_bytes(DType::Q4_0, hd)));
  std::vector<float> back(static_cast<size_t>(hd)), per_token(static_cast<size_t>(hd));
  double channel_err = 0, token_err = 0;
  for (int64_t r = 0; r < bs; ++r) {
    kv_channel_read_row(region.data(), r, hd, bs, back.data());
    std::vector<float> exact(static_cast<size_t>(hd));
    for (int64_t c = 0; c < hd; ++c) exact[c] = f16_to_f32(h[static_cast<size_t>(r * hd + c)]);
    kv_write_row(exact.data(), hd, DType::Q4_0, q4.data());
    kv_read_row(q4.data(), hd, DType::Q4_0, per_token.data());
    for (int64_t c = 0; c < hd; ++c) {
      float lo = INFINITY, hi = -INFINITY;
      for (int64_t j = 0; j < bs; ++j) {
        lo = std::min(lo, f16_to_f32(h[static_cast<size_t>(j * hd + c)]));
        hi = std::max(hi, f16_to_f32(h[static_cast<size_t>(j * hd + c)]));
      }
      const float step = (hi - lo) / 15.0f;
      ASSERT_LE(std::fabs(back[c] - exact[c]), 0.5f * step * 1.03f + 2e-3f * std::fabs(lo) + 1e-6f)
          << "row " << r << " channel " << c;
      if (c % 8 != 0) {  // the small channels
        channel_err += std::fabs(back[c] - exact[c]);
        token_err += std::fabs(per_token[c] - exact[c]);
      }
    }
  }
  EXPECT_LT(channel_err * 10, token_err);
}

}  // namespace
}  // namespace ember
