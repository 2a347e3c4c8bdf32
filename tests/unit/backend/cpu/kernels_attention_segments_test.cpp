// Long contexts in segments (kernels.h: attention_segment_keys, fold_attention_state): one call
// that walks a token's segments in turn, the segments computed apart (attention_segment) and
// folded in order, and the CPU backend spreading one decode token's segments over its threads
// all give the same bits; every ISA, every cache dtype, sliding windows, per-channel K; and they
// stay within the kernels' tolerance of the reference (double, no segments).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/backend/kv_row_format.h"
#include "ember/backend/reference/reference_kernels.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/backend/cpu/kv_pool_test_util.h"

namespace ember::cpu {
namespace {

using test::Case;
using test::IsaScope;
using test::kKvDtypes;
using test::make_pool;
using test::Pool;
using test::random_floats;
using test::supported_isas;

// One token's heads from its segments computed apart (kv_span kv heads a call: one, or all of
// them walked together), folded in order, normalised.
std::vector<float> by_segments(const float* q, int64_t n_heads, const PagedKv& kv,
                               const int32_t* table, int64_t ctx, const AttentionScores& scores,
                               int64_t kv_span) {
  const int64_t hd = kv.head_dim, heads = kv_span * (n_heads / kv.n_kv_heads);
  const int64_t keys = attention_segment_keys(kv.block_size);
  std::vector<float> out(static_cast<size_t>(n_heads * hd));
  std::vector<float> partial(static_cast<size_t>(heads * (hd + 2)));
  for (int64_t g = 0; g < kv.n_kv_heads; g += kv_span) {
    std::vector<std::vector<float>> totals(static_cast<size_t>(heads),
                                           std::vector<float>(static_cast<size_t>(hd), 0.0f));
    std::vector<float> m(static_cast<size_t>(heads), -INFINITY), l(static_cast<size_t>(heads));
    for (int64_t s = scores.first_key(ctx) / keys; s * keys < ctx; ++s) {
      attention_segment(q, n_heads, kv, table, ctx, scores, g, g + kv_span, s, partial.data());
      for (int64_t j = 0; j < heads; ++j) {
        const float* st = partial.data() + j * (hd + 2);
        fold_attention_state(totals[j].data(), &m[j], &l[j], st, st[hd], st[hd + 1], hd);
      }
    }
    const int64_t h0 = g * (n_heads / kv.n_kv_heads);
    for (int64_t j = 0; j < heads; ++j) {
      const float inv = l[j] > 0.0f ? 1.0f / l[j] : 0.0f;
      for (int64_t d = 0; d < hd; ++d) out[(h0 + j) * hd + d] = totals[j][d] * inv;
    }
  }
  return out;
}

TEST(KernelsAttentionSegments, SegmentsFoldedApartMatchOneCallBitExactly) {
  const Case cases[] = {
      {9, 3, 64, 16, 2600},  // SmolLM2's shape, three segments, the last one partial
      {8, 4, 64, 16, 2048},  // group of 2; ends on a segment boundary
      {4, 4, 20, 16, 1100},  // no GQA, head_dim not a multiple of 8 (the head-by-head kernel)
      {9, 3, 8, 5, 1500},    // an odd block size: segments of whole 65-key steps
  };
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kKvDtypes) {
      for (const Case& c : cases) {
        if (!kv_dtype_problem(dtype, c.head_dim).empty()) continue;
        for (int64_t window : {int64_t{0}, int64_t{1300}}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " kv " + dtype_name(dtype) +
                       " hd=" + std::to_string(c.head_dim) + " ctx=" + std::to_string(c.ctx_len) +
                       " window " + std::to_string(window));
          const AttentionScores scores(0.125f, 0.0f, window);
          Pool p = make_pool(c, 40 + static_cast<uint32_t>(c.ctx_len), dtype);
          for (int64_t b = 0; b < scores.first_key(c.ctx_len) / c.block_size; ++b) p.table[b] = -1;
          const auto q = random_floats(c.n_heads * c.head_dim, 41, -2.0f, 2.0f);
          std::vector<float> whole(q.size());
          attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scores, whole.data());
          for (int64_t span : {int64_t{1}, c.n_kv_heads}) {
            const std::vector<float> split =
                by_segments(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scores, span);
            EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0) << span;
          }
          if (dtype == DType::F32 || dtype == DType::Q8_0) {
            std::vector<float> want(q.size());
            reference::attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scores,
                                 want.data());
            for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(whole[i], want[i], 2e-5) << i;
          }
        }
      }
    }
  }
}

// Per-channel K: a token reads its own block's rows exact, earlier blocks sealed, in every
// segment alike.
TEST(KernelsAttentionSegments, PerChannelKSegmentsMatchOneCallBitExactly) {
  const Case c{9, 3, 64, 16, 2100};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(isa_name(isa));
    test::ChannelPool p = test::make_channel_pool(c, 51, DType::Q4_0, 0.01f);
    const auto q = random_floats(c.n_heads * c.head_dim, 52);
    const AttentionScores scores(0.125f, 0.0f, 0);
    std::vector<float> whole(q.size());
    attention(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scores, whole.data());
    for (int64_t span : {int64_t{1}, c.n_kv_heads}) {
      const auto split =
          by_segments(q.data(), c.n_heads, p.kv, p.table.data(), c.ctx_len, scores, span);
      EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0) << span;
    }
  }
}

// The CPU backend: a decode step of one token at a 4,200-token context on 2 or 3 threads (its 3
// kv heads alone would leave threads idle, so the contexts go out by segment: on 3 threads a kv
// head per segment, on 2 all of them, as 5 segments serve 2 threads twice over) gives the bits of
// the same step on one thread (no split).
TEST(KernelsAttentionSegments, BackendSplitOverThreadsMatchesOneThreadBitExactly) {
  const int64_t n_heads = 9, n_kv = 3, hd = 64, block = 16, ctx = 4200;
  for (DType dtype : {DType::F32, DType::F16, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    KvShape shape;
    shape.n_layers = 1;
    shape.n_blocks = ctx / block + 8;
    shape.block_size = block;
    shape.n_kv_heads = n_kv;
    shape.head_dim = hd;
    shape.set_dtype(dtype);
    std::vector<int32_t> table(static_cast<size_t>(shape.n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    auto batch_of = [&](int64_t start, int64_t n) {
      Batch b;
      b.tokens.assign(static_cast<size_t>(n), 1);
      b.sequences.push_back({table.data(), start, n});
      b.finalize();
      return b;
    };
    const Batch fill = batch_of(0, ctx - 1), step = batch_of(ctx - 1, 1);
    const auto k = random_floats(ctx * n_kv * hd, 71), v = random_floats(ctx * n_kv * hd, 72);
    const auto q = random_floats(n_heads * hd, 73, -3.0f, 3.0f);
    auto run = [&](int threads) {
      BackendOptions bo;
      bo.name = "cpu";
      bo.n_threads = threads;
      std::shared_ptr<Backend> backend = make_backend(bo);
      std::unique_ptr<KvStorage> kv = backend->allocate_kv(shape);
      backend->store_kv(*kv, 0, k.data(), v.data(), fill);
      backend->store_kv(*kv, 0, k.data() + (ctx - 1) * n_kv * hd, v.data() + (ctx - 1) * n_kv * hd,
                        step);
      std::vector<float> out(q.size());
      backend->attention(*kv, 0, q.data(), n_heads, AttentionScores(0.125f, 0.0f, 0), step,
                         out.data());
      return out;
    };
    const std::vector<float> one = run(1), two = run(2), three = run(3);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0);
    EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * 4), 0);
  }
}

}  // namespace
}  // namespace ember::cpu
