// Paged attention on every ISA the CPU runs against the reference (gathered K/V, full softmax in
// double), from f32, f16, bf16, q8_0 and q4_0 caches (and K and V in different dtypes). Tolerance:
// absolute 2e-5 with q, K, V in [-1, 1] (outputs are convex combinations of V); from a narrow
// cache the reference reads the same stored rows (widened exactly), so the tolerance is the same,
// except where the kernels round P to int16 against q8_0 or q4_0 V (kv_pv_q8.h): up to 1 / 65534
// of a step's largest weight per key, a few 1e-5 where few keys carry the softmax
// (reference_tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/cpu/kv_query_q8.h"
#include "ember/backend/kv_row_format.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/backend/cpu/kv_pool_test_util.h"

namespace ember::cpu {
namespace {

using test::IsaScope;
using test::random_floats;
using test::supported_isas;

using test::Case;
using test::kKvDtypes;
using test::make_pool;
using test::Pool;

// The tolerance against the reference for a cache: 2e-5, or 2e-4 where P V runs in integers on a
// q8_0 or q4_0 V cache (kv_pv_q8.h; the reference keeps P in double: up to 1 / 65534 of a step's
// largest weight per key, ~1e-4 over a peaked step of 64 keys). A wrong value, scale or key would
// still be off by far more (V's values are ~1, its quantization steps 1 / 127 or 1 / 7).
double reference_tolerance(const PagedKv& kv) {
  const bool q8_v =
      kv_scores_in_int8(kv.k_dtype, kv.head_dim, kv.k_channel) && kv.v_dtype == DType::Q8_0;
  const bool q4_v = kv.v_dtype == DType::Q4_0 && kv.head_dim % kQuantBlock == 0;
  return (q8_v || q4_v) && active_isa() != Isa::Scalar ? 2e-4 : 2e-5;
}

TEST(KernelsAttention, MatchesReferenceWithPagedGqa) {
  const Case cases[] = {
      {9, 3, 64, 16, 37},   // SmolLM2 shape, ctx not a multiple of the block size
      {9, 3, 64, 16, 1},    // a single position
      {8, 4, 64, 16, 100},  // group of 2
      {8, 4, 8, 16, 53},    // tiny head_dim
      {9, 3, 8, 5, 23},     // odd block size
      {4, 4, 20, 16, 40},   // no GQA; head_dim not a multiple of 8
      {9, 3, 64, 16, 512},  // a long context
      // Softmax steps of whole blocks (>= 64 keys): several steps, the last one partial.
      {9, 3, 64, 16, 200},  // 4 blocks a step: 64, 64, 64, 8 keys
      {9, 3, 8, 5, 150},    // 12 blocks a step: 60, 60, 30 keys
      {4, 2, 16, 80, 170},  // a block longer than a step: one block a step
      // q8_0 V in integers (kv_pv_q8.h) with blocks not a multiple of 8 rows, odd and even: a
      // step's keys pair across blocks.
      {9, 3, 64, 5, 77},
      {6, 2, 32, 12, 100},
      // A step of 320 keys: integer P V sums in chunks of 256.
      {4, 2, 32, 320, 700},
  };
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kKvDtypes)
      for (const Case& c : cases) {
        if (!kv_dtype_problem(dtype, c.head_dim).empty()) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " kv " + dtype_name(dtype) +
                     " heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
                     " hd=" + std::to_string(c.head_dim) + " bs=" + std::to_string(c.block_size) +
                     " ctx=" + std::to_string(c.ctx_len));
        Pool p = make_pool(c, static_cast<uint32_t>(c.ctx_len), dtype);
        auto q = random_floats(c.n_heads * c.head_dim, 99);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        std::vector<float> out(q.size()), want(q.size());
        attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scale, out.data());
        reference::attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scale,
                             want.data());
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], want[i], reference_tolerance(p.kv)) << i;
        }
      }
  }
}

// K and V in different dtypes (--kv-dtype-k / --kv-dtype-v): each read in its own format.
TEST(KernelsAttention, MixedKAndVDtypesMatchReference) {
  const std::pair<DType, DType> pairs[] = {{DType::Q8_0, DType::F16},
                                           {DType::F16, DType::Q4_0},
                                           {DType::Q4_0, DType::Q8_0},
                                           {DType::F32, DType::Q8_0}};
  const Case cases[] = {{9, 3, 64, 16, 150}, {8, 4, 8, 5, 41}};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (const auto& [kd, vd] : pairs) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " k " + dtype_name(kd) + " v " + dtype_name(vd) +
                     " hd " + std::to_string(c.head_dim));
        Pool p = make_pool(c, 77, kd, vd);
        for (int64_t nt : {1, 5}) {
          const int64_t qd = c.n_heads * c.head_dim, ctx0 = c.ctx_len - nt + 1;
          auto q = random_floats(nt * qd, 78);
          std::vector<float> out(q.size()), want(q.size());
          attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), ctx0, 0.125f,
                           out.data(), qd, 0, c.n_kv_heads);
          for (int64_t u = 0; u < nt; ++u) {
            reference::attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx0 + u,
                                 0.125f, want.data() + u * qd);
          }
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_NEAR(out[i], want[i], reference_tolerance(p.kv)) << i;
          }
        }
      }
    }
  }
}

// Per-channel K (kv_channel_blocks.h): each query reads its own block's keys from the exact rows
// and every other block's from the sealed codes, whichever tokens share the call (tiles here
// cross block boundaries). Expected: the reference over an f32 pool holding exactly the keys that
// query should see, within what the sealed blocks' integer scores add (the query folded into a
// block's scales and rounded to 15 bits, kv_channel_query.h: a few 1e-5 here); the reference
// backend's own reader, which models that rounding, within reference_tolerance; and a tile gives
// each token the bits of its single-token call.
TEST(KernelsAttention, PerChannelKReadsTheOwnBlockExactAndEarlierBlocksSealed) {
  const Case cases[] = {{9, 3, 64, 16, 150}, {8, 4, 8, 16, 53}, {4, 2, 16, 8, 41}};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType vd : {DType::Q4_0, DType::F16, DType::F32}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " v " + dtype_name(vd) +
                     " hd=" + std::to_string(c.head_dim) + " bs=" + std::to_string(c.block_size));
        test::ChannelPool p = test::make_channel_pool(c, 21, vd, 0.25f);
        const int64_t nt = 11, ctx0 = c.ctx_len - nt + 1, qd = c.n_heads * c.head_dim;
        const int64_t hd = c.head_dim;
        auto q = random_floats(nt * qd, 22, -2.0f, 2.0f);
        std::vector<float> tiled(q.size()), single(q.size()), want(q.size()), modelled(q.size());
        attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), ctx0, 0.3f,
                         tiled.data(), qd, 0, c.n_kv_heads);
        for (int64_t u = 0; u < nt; ++u) {
          const int64_t ctx = ctx0 + u;
          attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx, 0.3f,
                    single.data() + u * qd);
          reference::attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx, 0.3f,
                               modelled.data() + u * qd);
          // The keys this query sees, in an f32 pool of the same block table.
          Pool seen = make_pool(c, 21, vd);
          seen.kv.k_dtype = DType::F32;
          seen.kv.k_row_bytes = hd * 4;
          seen.kb.assign(seen.k.size() * 4, 0);
          seen.kv.k_pool = seen.kb.data();
          for (int64_t pos = 0; pos < ctx; ++pos) {
            for (int64_t g = 0; g < c.n_kv_heads; ++g) {
              const std::vector<float> k = p.key_seen(pos, ctx - 1, g);
              const int64_t row =
                  seen.kv.row_index(p.table[pos / c.block_size], pos % c.block_size, g);
              std::memcpy(seen.kb.data() + row * hd * 4, k.data(), static_cast<size_t>(hd) * 4);
            }
          }
          reference::attention(q.data() + u * qd, c.n_heads, seen.kv, seen.table.data(), ctx, 0.3f,
                               want.data() + u * qd);
        }
        EXPECT_EQ(std::memcmp(tiled.data(), single.data(), tiled.size() * 4), 0);
        double worst = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(single[i], modelled[i], reference_tolerance(p.kv)) << i;
          ASSERT_NEAR(single[i], want[i], reference_tolerance(p.kv) + 1e-4) << i;
          worst = std::max(worst, std::fabs(static_cast<double>(single[i]) - want[i]));
        }
        // The rounding is there (sealed blocks are not scored in floats) and small.
        if (c.ctx_len > c.block_size) {
          EXPECT_GT(worst, 0.0);
        }
      }
    }
  }
}

// Sliding windows and soft-caps (attention_scores.h), with the blocks wholly behind the window
// given back to the pool (table entries -1): every ISA against the reference, and a tile of
// tokens against single-token calls bit for bit (each token's own window).
TEST(KernelsAttention, WindowAndSoftCapWithReleasedBlocks) {
  const Case c{9, 3, 64, 16, 150};  // several softmax steps; the window starts inside a step
  for (Isa isa : supported_isas()) {
    for (DType dtype : kKvDtypes) {
      IsaScope scope(isa);
      SCOPED_TRACE(std::string(isa_name(isa)) + " kv " + dtype_name(dtype));
      for (int64_t window : {1, 20, 37, 100, 400}) {
        for (float cap : {0.0f, 0.7f}) {
          const AttentionScores scores(0.5f, cap, window);
          Pool p = make_pool(c, 31 + static_cast<uint32_t>(window), dtype);
          const int64_t nt = 8, ctx0 = c.ctx_len - nt + 1, qd = c.n_heads * c.head_dim;
          // The first token's window starts earliest; blocks wholly before it are gone.
          for (int64_t b = 0; b < scores.first_key(ctx0) / c.block_size; ++b) p.table[b] = -1;
          auto q = random_floats(nt * qd, 32, -3.0f, 3.0f);
          std::vector<float> tiled(q.size()), single(q.size()), want(q.size());
          attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), ctx0, scores,
                           tiled.data(), qd, 0, c.n_kv_heads);
          for (int64_t u = 0; u < nt; ++u) {
            attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx0 + u, scores,
                      single.data() + u * qd);
            reference::attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), ctx0 + u,
                                 scores, want.data() + u * qd);
          }
          EXPECT_EQ(std::memcmp(tiled.data(), single.data(), tiled.size() * 4), 0)
              << "window " << window << " cap " << cap;
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(single[i], want[i], reference_tolerance(p.kv))
                << "window " << window << " cap " << cap;
          }
        }
      }
    }
  }
}

// The AVX-512 set runs attention's softmax steps on 512-bit vectors (avx512_attention_step.cpp)
// and promises the AVX2 steps' bits: every cache dtype and per-channel K, GQA groups of 1 to 8 (4
// and 8 as passes of 4 on AVX-512, of 2 on AVX2; 5 and 7 one head at a time),
// head_dim 8 (no 16-value chunk), 24 (16 + 8), 64, 96 (64 + 32) and 128, blocks of 8 and 16,
// partial last blocks, a window with a soft-cap, one token and a tile of several.
TEST(KernelsAttention, Avx512StepsGiveTheAvx2Bits) {
  const auto isas = supported_isas();
  if (std::find(isas.begin(), isas.end(), Isa::Avx512) == isas.end()) {
    GTEST_SKIP() << "this CPU does not run the AVX-512 set";
  }
  const Case cases[] = {
      {9, 3, 64, 16, 1100}, {6, 3, 24, 16, 77},   {4, 4, 128, 16, 200}, {6, 2, 96, 8, 90},
      {6, 3, 8, 16, 40},    {8, 4, 32, 16, 64},   {12, 3, 64, 16, 150}, {8, 2, 128, 16, 90},
      {8, 2, 24, 16, 45},   {16, 2, 64, 16, 100}, {12, 2, 64, 16, 70},  {10, 2, 32, 16, 60},
      {14, 2, 64, 16, 40},  {9, 3, 64, 5, 77},    {6, 2, 32, 12, 100},  {6, 2, 32, 320, 700}};
  // The third: scores hundreds apart, so whole steps' weights underflow towards 0 (kv_pv_q8.h's
  // smallest W).
  const AttentionScores rules[] = {AttentionScores(0.125f), AttentionScores(0.5f, 0.7f, 37),
                                   AttentionScores(24.0f)};
  const auto run = [](Isa isa, const Pool& p, const Case& c, const std::vector<float>& q,
                      int64_t nt, const AttentionScores& scores) {
    IsaScope scope(isa);
    const int64_t qd = c.n_heads * c.head_dim, ctx0 = c.ctx_len - nt + 1;
    std::vector<float> out(q.size());
    attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), ctx0, scores, out.data(),
                     qd, 0, c.n_kv_heads);
    return out;
  };
  for (const Case& c : cases) {
    const auto check = [&](const Pool& p) {
      for (const AttentionScores& scores : rules) {
        for (int64_t nt : {1, 5}) {
          SCOPED_TRACE("hd " + std::to_string(c.head_dim) + " group " +
                       std::to_string(c.n_heads / c.n_kv_heads) + " k " + dtype_name(p.kv.k_dtype) +
                       (p.kv.k_channel ? " per channel" : "") + " v " + dtype_name(p.kv.v_dtype) +
                       " nt " + std::to_string(nt) + " window " + std::to_string(scores.window));
          const auto q = random_floats(nt * c.n_heads * c.head_dim, 44, -2.0f, 2.0f);
          const auto wide = run(Isa::Avx512, p, c, q, nt, scores);
          const auto narrow = run(Isa::Avx2, p, c, q, nt, scores);
          EXPECT_EQ(std::memcmp(wide.data(), narrow.data(), wide.size() * 4), 0);
        }
      }
    };
    for (DType dtype : kKvDtypes) {
      const bool quantized = dtype == DType::Q8_0 || dtype == DType::Q4_0;
      if (!quantized || c.head_dim % kQuantBlock == 0) check(make_pool(c, 41, dtype));
    }
    for (DType vd : {DType::Q4_0, DType::F16}) {
      if (vd != DType::Q4_0 || c.head_dim % kQuantBlock == 0) {
        check(test::make_channel_pool(c, 43, vd, 0.25f));
      }
    }
  }
}

// Large scores (peaked softmax, the running max changes often) stay accurate.
TEST(KernelsAttention, PeakedScores) {
  const Case c{6, 2, 16, 4, 45};
  for (Isa isa : supported_isas()) {
    for (DType dtype : kKvDtypes) {
      IsaScope scope(isa);
      Pool p = make_pool(c, 5, dtype);
      auto q = random_floats(c.n_heads * c.head_dim, 6, -8.0f, 8.0f);
      std::vector<float> out(q.size()), want(q.size());
      attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 1.0f, out.data());
      reference::attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 1.0f, want.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], want[i], reference_tolerance(p.kv)) << i;
      }
    }
  }
}

// Where the blocks live in the pool does not change a single bit of the output.
TEST(KernelsAttention, BlockPlacementDoesNotChangeBits) {
  const Case c{9, 3, 64, 16, 70};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kKvDtypes) {
      Pool a = make_pool(c, 3, dtype);
      // Copy the same logical K/V into a pool with the blocks in reverse table order.
      Pool b = a;
      const int64_t block_bytes = c.block_size * c.n_kv_heads * a.kv.k_row_bytes;
      const auto n = static_cast<int64_t>(a.table.size());
      for (int64_t i = 0; i < n; ++i) {
        const int32_t dst = static_cast<int32_t>(n - 1 - i);
        std::memcpy(&b.kb[dst * block_bytes], &a.kb[a.table[i] * block_bytes], block_bytes);
        std::memcpy(&b.vb[dst * block_bytes], &a.vb[a.table[i] * block_bytes], block_bytes);
        b.table[i] = dst;
      }
      b.kv.k_pool = b.kb.data();
      b.kv.v_pool = b.vb.data();
      auto q = random_floats(c.n_heads * c.head_dim, 8);
      std::vector<float> oa(q.size()), ob(q.size());
      attention(q.data(), c.n_heads, a.kv, a.table.data(), c.ctx_len, 0.125f, oa.data());
      attention(q.data(), c.n_heads, b.kv, b.table.data(), c.ctx_len, 0.125f, ob.data());
      EXPECT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * 4), 0) << dtype_name(dtype);
    }
  }
}

// Computing the kv heads in separate ranges (as the forward pass splits one token across threads)
// writes exactly the bits of the whole call, and each range touches only its own heads.
TEST(KernelsAttention, KvHeadRangesMatchWholeCallBitExactly) {
  const Case c{9, 3, 64, 16, 45};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(isa_name(isa));
    Pool p = make_pool(c, 11);
    auto q = random_floats(c.n_heads * c.head_dim, 12);
    std::vector<float> whole(q.size()), split(q.size(), -7.0f);
    attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 0.125f, whole.data());
    const int64_t per_kv = (c.n_heads / c.n_kv_heads) * c.head_dim;
    attention_kv_heads(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 0.125f, split.data(),
                       1, 2);
    for (int64_t i = 0; i < static_cast<int64_t>(split.size()); ++i) {
      const bool inside = i >= per_kv && i < 2 * per_kv;
      if (!inside) {
        ASSERT_EQ(split[i], -7.0f) << i;
      }
    }
    attention_kv_heads(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 0.125f, split.data(),
                       2, 3);
    attention_kv_heads(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, 0.125f, split.data(),
                       0, 1);
    EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0);
  }
}

// A tile of consecutive query tokens (causal prefill) gives every token the bits of its own
// single-token call, whatever the tile's length and first position; also where the tokens'
// contexts cross from one segment of keys into the next (attention_segment_keys: 1,024 here).
TEST(KernelsAttention, QueryTilesMatchSingleTokensBitExactly) {
  const std::pair<Case, std::vector<int64_t>> cases[] = {
      {{9, 3, 64, 16, 75}, {1, 15, 16, 40}}, {{9, 3, 64, 16, 1100}, {1018, 1024, 1025, 1090}}};
  for (Isa isa : supported_isas()) {
    for (DType dtype : kKvDtypes) {
      for (const auto& [c, firsts] : cases) {
        IsaScope scope(isa);
        SCOPED_TRACE(std::string(isa_name(isa)) + " kv " + dtype_name(dtype));
        Pool p = make_pool(c, 21, dtype);
        const int64_t qd = c.n_heads * c.head_dim;
        for (int64_t first : firsts) {
          for (int64_t nt : {1, 2, 7, 8}) {
            if (first + nt - 1 > c.ctx_len) continue;
            auto q = random_floats(nt * qd, 22 + static_cast<uint32_t>(first));
            std::vector<float> tiled(q.size()), single(q.size());
            attention_tokens(q.data(), nt, qd, c.n_heads, p.kv, p.table.data(), first, 0.125f,
                             tiled.data(), qd, 0, c.n_kv_heads);
            for (int64_t u = 0; u < nt; ++u) {
              attention(q.data() + u * qd, c.n_heads, p.kv, p.table.data(), first + u, 0.125f,
                        single.data() + u * qd);
            }
            EXPECT_EQ(std::memcmp(tiled.data(), single.data(), tiled.size() * 4), 0)
                << "first " << first << " nt " << nt;
          }
        }
      }
    }
  }
}

// A narrow cache gives (nearly) the f32 cache's output: the only change is K/V rounded as stored.
// Bounds: f16 keeps ~11 bits (relative 2^-11 per value), bf16 8 bits; q8_0 rounds each value to
// within half a step of max|x| / 127 per group of 32, q4_0 to within half of max|x| / 8 (measured
// max differences on this case: f16 ~2e-4, bf16 ~2e-3, q8_0 ~3e-3, q4_0 ~4e-2).
TEST(KernelsAttention, NarrowCachesStayCloseToF32Cache) {
  const Case c{9, 3, 64, 16, 200};
  const std::pair<DType, double> bounds[] = {
      {DType::F16, 2e-3}, {DType::BF16, 1e-2}, {DType::Q8_0, 1e-2}, {DType::Q4_0, 1e-1}};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    Pool p32 = make_pool(c, 31, DType::F32);
    auto q = random_floats(c.n_heads * c.head_dim, 32, -4.0f, 4.0f);
    std::vector<float> o32(q.size());
    attention(q.data(), c.n_heads, p32.kv, p32.table.data(), c.ctx_len, 0.125f, o32.data());
    for (const auto& [dtype, bound] : bounds) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " kv " + dtype_name(dtype));
      Pool pn = make_pool(c, 31, dtype);
      std::vector<float> on(q.size());
      attention(q.data(), c.n_heads, pn.kv, pn.table.data(), c.ctx_len, 0.125f, on.data());
      double max_diff = 0.0;
      for (size_t i = 0; i < q.size(); ++i) {
        max_diff = std::max(max_diff, std::abs(static_cast<double>(o32[i]) - on[i]));
      }
      EXPECT_GT(max_diff, 0.0);  // the cache really holds the narrow rows
      EXPECT_LT(max_diff, bound);
    }
  }
}

// store_kv: F32 copies; F16 rounds to nearest even on every ISA, with the same bits as the scalar
// f32_to_f16 (ties, subnormals, overflow to infinity included).
TEST(KernelsAttention, StoreKvRoundsToF16LikeTheScalarConversion) {
  std::vector<float> x = random_floats(1000, 41, -70000.0f, 70000.0f);
  const float specials[] = {0.0f,           -0.0f,    1.0f,   65504.0f, 65519.0f, 65520.0f,
                            -65520.0f,      1e-5f,    6e-8f,  3e-8f,    2.98e-8f, 1.00048828125f,
                            1.00146484375f, -2.5e-6f, 1e-30f, 0.1f,     3.14159f, 1e9f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  for (size_t i = 0; i < 64; ++i)
    x.push_back(random_floats(1, 50 + static_cast<uint32_t>(i))[0] * 1e-5f);
  const auto n = static_cast<int64_t>(x.size());
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(isa_name(isa));
    std::vector<uint16_t> h(x.size());
    store_kv(x.data(), n, DType::F16, h.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], f32_to_f16(x[i])) << x[i];
    std::vector<float> f(x.size());
    store_kv(x.data(), n, DType::F32, f.data());
    EXPECT_EQ(std::memcmp(f.data(), x.data(), x.size() * 4), 0);
    // bf16 and the quantized rows: the bits of the row format's writer.
    for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
      for (int64_t hd : {8, 16, 64, 96, 128}) {
        const int64_t bytes = kv_row_bytes(dtype, hd);
        std::vector<uint8_t> got(static_cast<size_t>(bytes)), want(got.size());
        store_kv(x.data() + 100, hd, dtype, got.data());
        kv_write_row(x.data() + 100, hd, dtype, want.data());
        EXPECT_EQ(got, want) << dtype_name(dtype) << " hd " << hd;
      }
    }
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);        // rounds up to infinity
  EXPECT_EQ(f32_to_f16(1.00048828125f), 0x3c00);  // a tie rounds to even (down)
  EXPECT_EQ(f32_to_f16(1.00146484375f), 0x3c02);  // a tie rounds to even (up)
}

}  // namespace
}  // namespace ember::cpu
