// The integer score rule for q8_0 K caches (backend/cpu/kv_query_q8.h): q8_key_score is the dot
// product of the rounded query and the stored key, and the query's rounding is the activations'.
#include "ember/backend/cpu/kv_query_q8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/backend/kv_row_format.h"
#include "ember/backend/reference/reference_kernels.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::random_floats;

TEST(KvQueryQ8, IntegerScoresAreQ8_0CachesInGroupsOf32Only) {
  EXPECT_TRUE(kv_scores_in_int8(DType::Q8_0, 64, false));
  EXPECT_TRUE(kv_scores_in_int8(DType::Q8_0, 96, false));
  EXPECT_FALSE(kv_scores_in_int8(DType::Q8_0, 8, false));  // groups of 8: widened to f32
  EXPECT_FALSE(kv_scores_in_int8(DType::Q8_0, 48, false));
  EXPECT_FALSE(kv_scores_in_int8(DType::Q4_0, 64, false));
  EXPECT_FALSE(kv_scores_in_int8(DType::F16, 64, false));
  EXPECT_FALSE(kv_scores_in_int8(DType::Q8_0, 64, true));
}

// Within a few f32 roundings of the exact dot product of the rounded vectors (one rounding per
// group's weight, product and sum), and near the unrounded query's score.
TEST(KvQueryQ8, KeyScoreIsTheDotProductOfTheRoundedVectors) {
  for (int64_t hd : {32, 64, 96, 128}) {
    const auto seed = static_cast<uint32_t>(hd);
    const std::vector<float> q = random_floats(hd, 2 + seed, -2.0f, 2.0f);
    const std::vector<float> k = random_floats(hd, 3 + seed, -1.5f, 1.5f);
    std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(DType::Q8_0, hd)));
    kv_write_row(k.data(), hd, DType::Q8_0, row.data());
    std::vector<float> k_stored(static_cast<size_t>(hd));
    kv_read_row(row.data(), hd, DType::Q8_0, k_stored.data());
    std::vector<BlockQ8Act> q8(static_cast<size_t>(hd / kQuantBlock));
    reference::quantize_activations(q.data(), 1, hd, q8.data());
    double want = 0.0, magnitude = 0.0, unrounded = 0.0;
    for (int64_t i = 0; i < hd; ++i) {
      const BlockQ8Act& b = q8[static_cast<size_t>(i / kQuantBlock)];
      const double qi = static_cast<double>(b.d) * b.qs[i % kQuantBlock];
      want += qi * k_stored[i];
      magnitude += std::fabs(qi * k_stored[i]);
      unrounded += static_cast<double>(q[i]) * k_stored[i];
    }
    const float got =
        q8_key_score(q8.data(), reinterpret_cast<const BlockQ8_0*>(row.data()), hd, 0.25f);
    EXPECT_NEAR(got, 0.25 * want, 0.25 * magnitude * 1e-6) << hd;
    EXPECT_NE(got, static_cast<float>(0.25 * unrounded)) << hd;  // the query really is rounded
    EXPECT_NEAR(got, 0.25 * unrounded, 0.25 * magnitude * 2e-2) << hd;
  }
}

}  // namespace
}  // namespace ember::cpu
