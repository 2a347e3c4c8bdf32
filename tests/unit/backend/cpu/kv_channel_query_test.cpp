// The integer score rule for sealed per-channel q4_0 K blocks (backend/cpu/kv_channel_query.h): the
// folded query is q * scale rounded to 15 bits and split into two signed bytes, a key's score is
// the exact integer dot product with its codes plus sum q * min, and 15 bits keep the error far
// below K's own 4-bit rounding even where a few channels are 100x the others (why not 8 bits).
#include "ember/backend/cpu/kv_channel_query.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "ember/backend/kv_channel_blocks.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::random_floats;

// A sealed region of bs keys whose channels c % 8 == 3 are `outlier` times the others (as K's
// are), and the exact keys it was sealed from.
struct SealedBlock {
  std::vector<float> exact;  // [bs, hd], f16-rounded
  std::vector<uint8_t> region;
};

SealedBlock sealed_block(int64_t hd, int64_t bs, float outlier, uint32_t seed) {
  SealedBlock b;
  const std::vector<float> x = random_floats(hd * bs, seed);
  std::vector<uint16_t> h(x.size());
  b.exact.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float size = static_cast<int64_t>(i) % hd % 8 == 3 ? outlier : 1.0f;
    h[i] = f32_to_f16(size * x[i] + 0.3f);
    b.exact[i] = f16_to_f32(h[i]);
  }
  b.region.resize(static_cast<size_t>(bs * kv_channel_row_bytes(hd, bs)));
  kv_channel_quantize(h.data(), hd, bs, b.region.data());
  return b;
}

TEST(KvChannelQuery, FoldedQueryIsQTimesScaleInFifteenBits) {
  for (int64_t hd : {8, 64, 128, 256}) {
    SCOPED_TRACE(hd);
    const SealedBlock b = sealed_block(hd, 16, 30.0f, static_cast<uint32_t>(hd));
    const std::vector<float> q = random_floats(hd, 7, -2.0f, 2.0f);
    ChannelQuery cq;
    fold_channel_query(q.data(), b.region.data(), hd, cq);
    const auto* scale = reinterpret_cast<const uint16_t*>(b.region.data());
    const uint16_t* min = scale + hd;
    int32_t top = 0;
    double bias = 0.0;
    for (int64_t c = 0; c < hd; ++c) {
      const int32_t qi = 128 * cq.hi[c] + cq.lo[c];
      ASSERT_GE(cq.lo[c], 0);
      ASSERT_LE(std::abs(qi), 16383);
      top = std::max(top, std::abs(qi));
      const double folded = static_cast<double>(q[c]) * f16_to_f32(scale[c]);
      ASSERT_NEAR(static_cast<double>(cq.a) * qi, folded, 0.5001 * cq.a) << c;
      bias += static_cast<double>(q[c]) * f16_to_f32(min[c]);
    }
    EXPECT_EQ(top, 16383);  // the largest |q * scale| takes the top level
    EXPECT_NEAR(cq.bias, bias, 1e-5 * (std::fabs(bias) + 1.0));
  }
  // A zero query folds to zero (no division by zero).
  const SealedBlock b = sealed_block(64, 16, 1.0f, 3);
  const std::vector<float> zero(64, 0.0f);
  ChannelQuery cq;
  fold_channel_query(zero.data(), b.region.data(), 64, cq);
  EXPECT_EQ(cq.a, 0.0f);
  EXPECT_EQ(channel_key_score(cq, b.region.data(), 5, 64, 16, 1.0f), 0.0f);
}

// A key's score is a * sum(qi * code) + bias, its integer part exact; within a 15-bit step of the
// float dot product with the stored key, and not equal to it (the query really is rounded).
TEST(KvChannelQuery, KeyScoreIsTheFoldedQueryTimesTheCodes) {
  const int64_t hd = 64, bs = 16;
  const SealedBlock b = sealed_block(hd, bs, 1.0f, 11);
  const std::vector<float> q = random_floats(hd, 12, -2.0f, 2.0f);
  ChannelQuery cq;
  fold_channel_query(q.data(), b.region.data(), hd, cq);
  int differs = 0;
  for (int64_t r = 0; r < bs; ++r) {
    std::vector<float> stored(static_cast<size_t>(hd));
    kv_channel_read_row(b.region.data(), r, hd, bs, stored.data());
    int64_t dot = 0;
    double unrounded = 0.0, magnitude = 0.0;
    for (int64_t c = 0; c < hd; ++c) {
      dot += int64_t{128 * cq.hi[c] + cq.lo[c]} * kv_channel_code(b.region.data(), r, c, hd, bs);
      unrounded += static_cast<double>(q[c]) * stored[c];
      magnitude += std::fabs(static_cast<double>(q[c]) * stored[c]);
    }
    ASSERT_EQ(channel_key_dot(cq, b.region.data(), r, hd, bs), dot);
    const float got = channel_key_score(cq, b.region.data(), r, hd, bs, 0.5f);
    EXPECT_NEAR(got, 0.5 * (static_cast<double>(cq.a) * dot + cq.bias), 1e-6 * magnitude);
    // Each channel's folded query is off by at most half a step (a / 2) times a code <= 15.
    EXPECT_NEAR(got, 0.5 * unrounded, 0.5 * (hd * 7.5 * cq.a + 1e-6 * magnitude)) << r;
    differs += got != static_cast<float>(0.5 * unrounded);
  }
  EXPECT_GT(differs, 0);
}

// With channels 100x the others the folded query's largest value belongs to them; 15 bits keep
// the score's added error under 2% of what K's own 4-bit rounding costs (8 bits would add ~0.4
// of it, rms: checked here by rounding the same folded query to 8 bits).
TEST(KvChannelQuery, OutlierChannelsLeaveTheOthersTheirPrecision) {
  const int64_t hd = 64, bs = 16;
  double rule_err = 0.0, eight_bit_err = 0.0, k_err = 0.0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const SealedBlock b = sealed_block(hd, bs, 100.0f, 100 + seed);
    const std::vector<float> q = random_floats(hd, 200 + seed, -2.0f, 2.0f);
    ChannelQuery cq;
    fold_channel_query(q.data(), b.region.data(), hd, cq);
    const auto* scale = reinterpret_cast<const uint16_t*>(b.region.data());
    double top = 0.0;
    for (int64_t c = 0; c < hd; ++c) {
      top = std::max(top, std::fabs(static_cast<double>(q[c]) * f16_to_f32(scale[c])));
    }
    for (int64_t r = 0; r < bs; ++r) {
      std::vector<float> stored(static_cast<size_t>(hd));
      kv_channel_read_row(b.region.data(), r, hd, bs, stored.data());
      double exact = 0.0, read = 0.0, eight = 0.0;
      for (int64_t c = 0; c < hd; ++c) {
        exact += static_cast<double>(q[c]) * b.exact[static_cast<size_t>(r * hd + c)];
        read += static_cast<double>(q[c]) * stored[c];
        const double folded = static_cast<double>(q[c]) * f16_to_f32(scale[c]);
        const double step8 = top / 127.0;
        eight += (std::nearbyint(folded / step8) * step8 - folded) *
                 kv_channel_code(b.region.data(), r, c, hd, bs);
      }
      const double rule = channel_key_score(cq, b.region.data(), r, hd, bs, 1.0f);
      rule_err += (rule - read) * (rule - read);
      eight_bit_err += eight * eight;
      k_err += (exact - read) * (exact - read);
    }
  }
  EXPECT_LT(std::sqrt(rule_err), 0.02 * std::sqrt(k_err));
  EXPECT_GT(std::sqrt(eight_bit_err), 0.25 * std::sqrt(k_err));
  std::printf("rms error of the scores / K's own: 15 bits %.4f, 8 bits %.3f\n",
              std::sqrt(rule_err / k_err), std::sqrt(eight_bit_err / k_err));
}

}  // namespace
}  // namespace ember::cpu
