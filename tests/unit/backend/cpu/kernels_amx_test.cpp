// The AMX kernel set (amx_kernels.h) against double-precision references on random data: the tile
// GEMM for bf16 weights (AmxTiles and Rows layouts) and for q8_0 / q4_0 (Interleaved8 blocks
// widened to bf16 tiles), the AVX-512 decode kernel on AmxTiles, shapes that are not whole tiles
// (rows % 16, K % 32 and K % 64 != 0, T % 16 != 0), row ranges, zero and extreme scales, and the
// determinism contract. On a machine without usable AMX every test here skips, naming what is
// missing.
//
// Reference: the exact product (in double) of the bf16-rounded activations and the bf16-rounded
// weights (q8_0 / q4_0: d * q, then rounded to bf16, as the panels do): the kernels' only other
// error is f32 accumulation, so the bound is 1e-5 * sum |x w|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::IsaScope;
using test::make_weights;
using test::random_floats;

float round_bf16(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

// A bf16 matrix in the AmxTiles layout (owning its bytes), from one in Rows.
struct TiledWeights {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
};

TiledWeights tile(const WeightMatrix& rows) {
  TiledWeights t;
  t.bytes.resize(static_cast<size_t>(amx_tiles_bytes(rows.n_rows, rows.n_cols)));
  t.view = pack_amx_tiles(rows, t.bytes.data());
  return t;
}

// y [T, N] against sum_k bf16(x) * bf16(w) in double, within 1e-5 * sum |x w| (w as stored,
// dequantized, then rounded to bf16), for the rows in [row_begin, row_end).
void expect_rounded_product(const std::vector<float>& x, int64_t T, const WeightMatrix& w,
                            const std::vector<float>& y, int64_t row_begin, int64_t row_end) {
  const int64_t N = w.n_rows, K = w.n_cols;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = row_begin; n < row_end; ++n) {
    reference::dequantize_row(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double{round_bf16(x[t * K + k])} * round_bf16(row[k]);
        sum += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(y[t * N + n], sum, 1e-5 * magnitude + 1e-30)
          << "t=" << t << " n=" << n << " K=" << K;
    }
  }
}

TEST(KernelsAmx, Bf16TilesAndRowsMatchTheRoundedProduct) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  for (int64_t N : {1, 15, 16, 17, 33, 50}) {
    for (int64_t K : {1, 31, 32, 33, 64, 96, 100, 576}) {
      auto rows = make_weights(random_floats(N * K, 41), N, K, DType::BF16);
      auto tiled = tile(rows.view);
      for (int64_t T : {1, 4, 15, 16, 17, 31, 32, 33, 70}) {
        for (const WeightMatrix* w : {&rows.view, &tiled.view}) {
          SCOPED_TRACE("N=" + std::to_string(N) + " K=" + std::to_string(K) +
                       " T=" + std::to_string(T) +
                       (w->layout == WeightLayout::AmxTiles ? " tiles" : " rows"));
          auto x = random_floats(T * K, 42);
          std::vector<float> y(static_cast<size_t>(T * N));
          matmul(x.data(), T, *w, y.data(), N, 0, N);
          expect_rounded_product(x, T, *w, y, 0, N);
        }
      }
    }
  }
}

TEST(KernelsAmx, QuantizedTilesMatchTheRoundedProduct) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
    // 8 and 24 rows: a block whose second 8-row group is missing; 40: a padded one.
    for (int64_t N : {8, 16, 24, 37, 48}) {
      for (int64_t K : {32, 96, 576}) {
        auto w = make_weights(random_floats(N * K, 51), N, K, dtype, WeightLayout::Interleaved8);
        for (int64_t T : {16, 17, 40}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " N=" + std::to_string(N) +
                       " K=" + std::to_string(K) + " T=" + std::to_string(T));
          ASSERT_TRUE(matmul_runs_on_tiles(w.view, T));
          ASSERT_EQ(matmul_input(w.view, T), MatmulInput::Bf16);
          auto x = random_floats(T * K, 52);
          std::vector<float> y(static_cast<size_t>(T * N));
          matmul(x.data(), T, w.view, y.data(), N, 0, N);
          expect_rounded_product(x, T, w.view, y, 0, N);
        }
      }
    }
  }
}

// Rows whose blocks have zero scales give exact zeros; scales near f16's extremes (tiny and
// large weights, large activations) stay within the bound, with no overflow or flush to zero of
// normal values.
TEST(KernelsAmx, ZeroAndExtremeScales) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const int64_t N = 32, K = 128, T = 20;
  for (DType dtype : {DType::Q8_0, DType::Q4_0, DType::BF16}) {
    std::vector<float> values = random_floats(N * K, 61);
    for (int64_t n = 0; n < N; ++n) {
      const float scale = n % 4 == 0 ? 0.0f : (n % 4 == 1 ? 3e-3f : (n % 4 == 2 ? 6e3f : 1.0f));
      for (int64_t k = 0; k < K; ++k) values[n * K + k] *= scale;
    }
    const auto layout = dtype == DType::BF16 ? WeightLayout::Rows : WeightLayout::Interleaved8;
    auto w = make_weights(values, N, K, dtype, layout);
    auto x = random_floats(T * K, 62, -100.0f, 100.0f);
    std::vector<float> y(static_cast<size_t>(T * N));
    SCOPED_TRACE(dtype_name(dtype));
    matmul(x.data(), T, w.view, y.data(), N, 0, N);
    expect_rounded_product(x, T, w.view, y, 0, N);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; n += 4) ASSERT_EQ(y[t * N + n], 0.0f);
    }
  }
}

// Row ranges that cut 16-row blocks write exactly their rows, with the bits of one whole call;
// and token t's outputs do not depend on T (16 and more tokens) or on which rows a call covers.
TEST(KernelsAmx, RowRangesAndTokenCountsDoNotChangeBits) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const int64_t N = 75, K = 200;
  for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
    const int64_t Kq = dtype == DType::BF16 ? K : 192;
    const auto layout = dtype == DType::BF16 ? WeightLayout::Rows : WeightLayout::Interleaved8;
    auto w = make_weights(random_floats(N * Kq, 71), N, Kq, dtype, layout);
    auto tiled = dtype == DType::BF16 ? tile(w.view) : TiledWeights{{}, w.view};
    const auto x = random_floats(64 * Kq, 72);
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> whole(static_cast<size_t>(64 * N));
    matmul(x.data(), 64, tiled.view, whole.data(), N, 0, N);
    std::vector<float> split(whole.size(), -7.0f);
    const int64_t cuts[] = {0, 5, 16, 19, 40, 64, 75};
    for (size_t i = 1; i < std::size(cuts); ++i) {
      matmul(x.data(), 64, tiled.view, split.data(), N, cuts[i - 1], cuts[i]);
    }
    ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)));
    for (int64_t T : {16, 17, 33}) {
      std::vector<float> part(static_cast<size_t>(T * N));
      matmul(x.data(), T, tiled.view, part.data(), N, 0, N);
      ASSERT_EQ(0, std::memcmp(whole.data(), part.data(), part.size() * sizeof(float)))
          << "T=" << T;
    }
    // A range writes nothing outside itself.
    std::vector<float> guarded(whole.size(), -7.0f);
    matmul(x.data(), 64, tiled.view, guarded.data(), N, 19, 40);
    for (int64_t t = 0; t < 64; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        if (n < 19 || n >= 40) {
          ASSERT_EQ(guarded[t * N + n], -7.0f) << t << " " << n;
        }
      }
    }
  }
}

// K past 24 chunks runs in K slabs with C kept in y between them, and rows in groups of 256: the
// slabbed sums are those of the rounded product, cut row ranges (inside a group, across groups,
// not whole tiles) give the bits of the whole call and write nothing outside themselves, and a
// token's bits do not depend on T.
TEST(KernelsAmx, LongKSlabsAndRowGroupsKeepTheBits) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const int64_t N = 333;
  for (DType dtype : {DType::BF16, DType::Q4_0}) {
    for (int64_t K : {800, 1000, 1536}) {
      const int64_t Kq = dtype == DType::BF16 ? K : K / 32 * 32;
      const auto layout = dtype == DType::BF16 ? WeightLayout::Rows : WeightLayout::Interleaved8;
      auto w = make_weights(random_floats(N * Kq, 111), N, Kq, dtype, layout);
      auto tiled = dtype == DType::BF16 ? tile(w.view) : TiledWeights{{}, w.view};
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " K=" + std::to_string(Kq));
      const int64_t T = 37;
      const auto x = random_floats(T * Kq, 112);
      std::vector<float> whole(static_cast<size_t>(T * N));
      matmul(x.data(), T, tiled.view, whole.data(), N, 0, N);
      expect_rounded_product(x, T, tiled.view, whole, 0, N);
      std::vector<float> split(whole.size(), -7.0f);
      const int64_t cuts[] = {0, 17, 64, 250, 270, 320, 333};
      for (size_t i = 1; i < std::size(cuts); ++i) {
        matmul(x.data(), T, tiled.view, split.data(), N, cuts[i - 1], cuts[i]);
      }
      ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)));
      std::vector<float> guarded(whole.size(), -7.0f);
      matmul(x.data(), T, tiled.view, guarded.data(), N, 250, 270);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          const float expected = n >= 250 && n < 270 ? whole[t * N + n] : -7.0f;
          ASSERT_EQ(guarded[t * N + n], expected) << t << " " << n;
        }
      }
      std::vector<float> part(static_cast<size_t>(17 * N));
      matmul(x.data(), 17, tiled.view, part.data(), N, 0, N);
      ASSERT_EQ(0, std::memcmp(whole.data(), part.data(), part.size() * sizeof(float)));
    }
  }
}
// Decode on AmxTiles (fewer than 16 tokens): batch rows equal single-token calls bit for bit.
TEST(KernelsAmx, TilesDecodeRowsMatchSingleToken) {
  EMBER_REQUIRE_AMX();
  IsaScope scope(Isa::Amx);
  const int64_t N = 45, K = 150;
  auto rows = make_weights(random_floats(N * K, 81), N, K, DType::BF16);
  auto tiled = tile(rows.view);
  const int64_t T = 7;
  const auto x = random_floats(T * K, 82);
  std::vector<float> batch(static_cast<size_t>(T * N)), single(static_cast<size_t>(N));
  matmul(x.data(), T, tiled.view, batch.data(), N, 0, N);
  for (int64_t t = 0; t < T; ++t) {
    matmul(x.data() + t * K, 1, tiled.view, single.data(), N, 0, N);
    ASSERT_EQ(0, std::memcmp(batch.data() + t * N, single.data(), N * sizeof(float))) << t;
  }
}

// The AmxTiles layout holds every value: unpacking a row gives the Rows bytes back.
TEST(KernelsAmx, TilesLayoutRoundTrips) {
  const int64_t N = 35, K = 77;
  auto rows = make_weights(random_floats(N * K, 91), N, K, DType::BF16);
  auto tiled = tile(rows.view);
  std::vector<uint8_t> row(static_cast<size_t>(rows.view.row_bytes));
  for (int64_t n = 0; n < N; ++n) {
    amx_tiles_row(tiled.view, n, row.data());
    ASSERT_EQ(0, std::memcmp(row.data(), rows.bytes.data() + n * rows.view.row_bytes, row.size()));
  }
}

// An AmxTiles matrix under another kernel set (loaded with AMX, then switched) is read through a
// Rows copy: the bits of that set on the Rows matrix.
TEST(KernelsAmx, TilesUnderOtherSetsEqualRows) {
  const int64_t N = 40, K = 64;
  auto rows = make_weights(random_floats(N * K, 95), N, K, DType::BF16);
  auto tiled = tile(rows.view);
  for (Isa isa : test::supported_isas()) {
    if (isa == Isa::Amx) continue;
    IsaScope scope(isa);
    for (int64_t T : {1, 20}) {
      const auto x = random_floats(T * K, 96);
      std::vector<float> a(static_cast<size_t>(T * N)), b(a.size());
      matmul(x.data(), T, rows.view, a.data(), N, 0, N);
      matmul(x.data(), T, tiled.view, b.data(), N, 0, N);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << isa_name(isa) << " T=" << T;
    }
  }
}

// The set's 512-bit silu_mul / gelu_mul give the AVX2 kernels' bits: random values over the
// whole range the exponential clamps (+-100), the clamp edges, zeros of both signs, infinities,
// NaN, subnormals, and every tail length.
TEST(KernelsAmx, ElementwiseOpsEqualTheAvx2OnesBitForBit) {
  EMBER_REQUIRE_AMX();
  std::vector<float> g = random_floats(4096, 41, -100.0f, 100.0f);
  std::vector<float> u = random_floats(4096, 42, -3.0f, 3.0f);
  const float specials[] = {0.0f,     -0.0f,     87.33654f, -87.33654f, 88.72283f, -88.72283f,
                            88.8f,    -88.8f,    1e-40f,    -1e-40f,    1e30f,     -1e30f,
                            INFINITY, -INFINITY, NAN,       20.0f,      -20.0f,    1e-7f};
  for (size_t i = 0; i < std::size(specials); ++i) g[i] = specials[i];
  const auto run = [&](Isa isa, bool gelu, bool with_up, int64_t n) {
    IsaScope scope(isa);
    std::vector<float> out(static_cast<size_t>(n));
    if (gelu) {
      gelu_mul(g.data(), with_up ? u.data() : nullptr, out.data(), n);
    } else {
      silu_mul(g.data(), u.data(), out.data(), n);
    }
    return out;
  };
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{15}, int64_t{17}, int64_t{33}, int64_t{4096}}) {
    for (int kind = 0; kind < 3; ++kind) {
      const bool gelu = kind > 0, with_up = kind != 2;
      const std::vector<float> want = run(Isa::Avx2, gelu, with_up, n);
      const std::vector<float> got = run(Isa::Amx, gelu, with_up, n);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "n=" << n << " kind=" << kind;
    }
  }
}

TEST(KernelsAmx, DispatchNamesTheSetOrSaysWhyNot) {
  IsaScope scope(Isa::Amx);
  if (amx_available()) {
    EXPECT_EQ(active_isa(), Isa::Amx);
    EXPECT_STREQ(isa_name(active_isa()), "amx");
  } else {
    EXPECT_NE(active_isa(), Isa::Amx);
    EXPECT_FALSE(amx_unavailable_reason().empty());
  }
}

}  // namespace
}  // namespace ember::cpu
