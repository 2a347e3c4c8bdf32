// Prefill attention on AMX tiles (amx_attention.cpp) against the reference (gathered K/V, full
// softmax in double): tiles of 16 to 45 tokens, from a fresh prompt and after a cached prefix,
// head_dim 32 / 64 / 128 (two passes), GQA groups of 1 to 3, every cache dtype, sliding windows;
// and the promise that a token's result does not depend on the other tokens of its tile. Skips
// on a machine without usable AMX, naming what is missing.
//
// Tolerance: absolute 1e-2 with q, K, V in [-1, 1] (outputs are convex combinations of V): Q, K, V
// and the probabilities are rounded to bf16 (2^-9 relative each); the scores' error, scale * sum
// |q k| * 2^-8 at most, moves the weights by < 1% here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/backend/reference/reference_kernels.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/backend/cpu/kv_pool_test_util.h"

namespace ember::cpu {
namespace {

using test::Case;
using test::IsaScope;
using test::make_pool;
using test::Pool;
using test::random_floats;

// Tokens [ctx0 - 1, ctx0 - 1 + nt) of a sequence (token u sees keys [0, ctx0 + u)), on tiles,
// against the reference one token at a time.
void expect_tile_matches_reference(const Case& c, DType dtype, int64_t nt, int64_t ctx0,
                                   const AttentionScores& scores, double tolerance = 1e-2) {
  Pool p = make_pool(c, static_cast<uint32_t>(c.ctx_len + nt), dtype);
  const int64_t qd = c.n_heads * c.head_dim;
  auto q = random_floats(nt * qd, 5 + static_cast<uint32_t>(ctx0));
  std::vector<float> out(q.size(), -9.0f), want(q.size());
  attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), ctx0, scores, out.data(), qd,
                   0, c.n_kv_heads);
  for (int64_t u = 0; u < nt; ++u) {
    reference::attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx0 + u, scores,
                         want.data() + u * qd);
  }
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], want[i], tolerance) << "token " << i / qd << " value " << i % qd;
    worst = std::max(worst, double{std::fabs(out[i] - want[i])});
  }
  // The tile kernel ran (bf16 rounding shows), not the f32 one.
  EXPECT_GT(worst, 1e-5);
}

TEST(KernelsAmxAttention, TilesMatchReference) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const Case cases[] = {
      {9, 3, 64, 16, 600},   // SmolLM2 shape
      {8, 8, 32, 16, 300},   // no GQA, head_dim 32
      {8, 4, 128, 16, 300},  // head_dim 128: two passes of 64
      {6, 3, 64, 5, 200},    // an odd block size
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      for (int64_t nt : {16, 17, 32, 45}) {
        for (int64_t ctx0 : {int64_t{1}, int64_t{100}}) {
          if (ctx0 + nt - 1 > c.ctx_len) continue;
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " hd=" + std::to_string(c.head_dim) +
                       " heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
                       " nt=" + std::to_string(nt) + " ctx0=" + std::to_string(ctx0));
          expect_tile_matches_reference(c, dtype, nt, ctx0, 1.0f / std::sqrt(float(c.head_dim)));
        }
      }
    }
  }
}

TEST(KernelsAmxAttention, SlidingWindowsAndPeakedScores) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const Case c{9, 3, 64, 16, 400};
  for (int64_t window : {int64_t{7}, int64_t{40}, int64_t{1000}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    expect_tile_matches_reference(c, DType::BF16, 45, 150, AttentionScores(0.125f, 0.0f, window));
  }
  // Scale 2: scores spread over tens of units, so the running maximum is raised (and the
  // accumulator rescaled) several times along the context.
  SCOPED_TRACE("peaked");
  expect_tile_matches_reference(c, DType::BF16, 32, 300, AttentionScores(2.0f), 2e-2);
}

// A token's output does not depend on which tokens share its tile, nor on their number.
TEST(KernelsAmxAttention, TokensDoNotDependOnTheirTile) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const Case c{9, 3, 64, 16, 300};
  Pool p = make_pool(c, 11, DType::F16);
  const int64_t qd = c.n_heads * c.head_dim, ctx0 = 50;
  const auto q = random_floats(48 * qd, 12);
  std::vector<float> whole(q.size()), part(q.size());
  attention_tokens(q.data(), 48, qd, c.n_heads, p.kv, p.table.data(), ctx0, 0.125f, whole.data(),
                   qd, 0, c.n_kv_heads);
  // Tokens 13..44 as a tile of their own (32), and 20..39 (20).
  for (auto [first, n] : {std::pair<int64_t, int64_t>{13, 32}, {20, 20}}) {
    attention_tokens(q.data() + first * qd, n, qd, c.n_heads, p.kv, p.table.data(), ctx0 + first,
                     0.125f, part.data(), qd, 0, c.n_kv_heads);
    ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + first * qd, n * qd * sizeof(float)))
        << "first " << first << " n " << n;
  }
}

// Soft-capped scores (Gemma 2), tiles under 16 tokens and f32 caches run the AVX2 kernel: its bits.
TEST(KernelsAmxAttention, SoftCapShortTilesAndF32CachesTakeTheAvx2Kernel) {
  EMBER_REQUIRE_AMX();
  const Case c{8, 4, 64, 16, 200};
  const int64_t qd = c.n_heads * c.head_dim;
  for (auto [nt, cap, dtype] : {std::tuple<int64_t, float, DType>{20, 30.0f, DType::BF16},
                                {15, 0.0f, DType::BF16},
                                {32, 0.0f, DType::F32}}) {
    Pool p = make_pool(c, 21, dtype);
    const auto q = random_floats(nt * qd, 22);
    std::vector<float> amx(q.size()), avx2(q.size());
    {
      IsaScope scope(Isa::Amx);
      attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), 100,
                       AttentionScores(0.125f, cap, 0), amx.data(), qd, 0, c.n_kv_heads);
    }
    {
      IsaScope scope(Isa::Avx2);
      attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), 100,
                       AttentionScores(0.125f, cap, 0), avx2.data(), qd, 0, c.n_kv_heads);
    }
    ASSERT_EQ(0, std::memcmp(amx.data(), avx2.data(), amx.size() * sizeof(float))) << nt;
  }
}

}  // namespace
}  // namespace ember::cpu
