// The bf16 prefill through f32 FMAs (avx512_matmul_bf16_fma.cpp), called directly so that it is
// tested on every AVX-512 CPU, not only where the dispatcher takes it (Intel): against the exact
// product of the bf16-rounded activations, across more than one slab of k, every leftover tile
// shape, row splits and token counts. And the decode through f32 FMAs
// (avx512_matmul_bf16_gemv_fma.cpp): the vdpbf16ps decode kernel's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::make_weights;
using test::random_floats;

bool has_avx512_kernels() {
  for (Isa isa : test::supported_isas()) {
    if (isa == Isa::Avx512) return true;
  }
  return false;
}

// y [T, ldy] from the FMA prefill over rows [row_begin, row_end) of w.
std::vector<float> fma_product(const std::vector<float>& x, int64_t T, const WeightMatrix& w,
                               int64_t ldy, int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols;
  std::vector<float> xp(static_cast<size_t>(avx512::bf16_prepared_floats(T, K)) + 16);
  avx512::bf16_prepare(x.data(), T, K, 0, T, xp.data());
  std::vector<float> y(static_cast<size_t>(T * ldy), -7.0f);
  const int64_t P = (K + 31) / 32 * 16;
  avx512::bf16_gemm_fma(reinterpret_cast<const uint32_t*>(xp.data()), P, T, w, y.data(), ldy,
                        row_begin, row_end);
  return y;
}

TEST(KernelsBf16Fma, IsTheProductOfRoundedActivations) {
  if (!has_avx512_kernels()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 kernels";
  const int64_t N = 37;                       // 3 tiles of 12 and one row left
  for (int64_t K : {1, 31, 33, 576, 1100}) {  // 1,100: three slabs of 512 values, the last partial
    for (int64_t T : {16, 35, 70}) {
      SCOPED_TRACE("K=" + std::to_string(K) + " T=" + std::to_string(T));
      auto w = make_weights(random_floats(N * K, 41), N, K, DType::BF16);
      auto x = random_floats(T * K, 42);
      const int64_t ldy = N + 2;
      const std::vector<float> y = fma_product(x, T, w.view, ldy, 0, N);
      std::vector<float> rounded(x.size());
      for (size_t i = 0; i < x.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
      std::vector<float> exact(static_cast<size_t>(T * N));
      reference::matmul(rounded.data(), T, w.view, exact.data(), N, 0, N);
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        reference::dequantize_row(w.view, n, row.data());
        for (int64_t t = 0; t < T; ++t) {
          double magnitude = 0;
          for (int64_t k = 0; k < K; ++k)
            magnitude += std::fabs(double{rounded[t * K + k]} * row[k]);
          ASSERT_NEAR(y[t * ldy + n], exact[t * N + n], 1e-5 * magnitude + 1e-30)
              << "t=" << t << " n=" << n;
        }
        for (int64_t t = 0; t < T; ++t) ASSERT_EQ(y[t * ldy + N], -7.0f);  // padding untouched
      }
    }
  }
}

TEST(KernelsBf16Fma, RowRangesAndTokenCountsGiveTheSameBits) {
  if (!has_avx512_kernels()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 kernels";
  const int64_t N = 29, K = 600, T = 48;
  auto w = make_weights(random_floats(N * K, 51), N, K, DType::BF16);
  auto x = random_floats(T * K, 52);
  const std::vector<float> whole = fma_product(x, T, w.view, N, 0, N);
  // Rows in pieces that change every tile shape (12, 8, 4, 2, 1) a row runs in.
  std::vector<float> pieces(whole.size(), 0.0f);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 5}, {5, 18}, {18, 21}, {21, 29}}) {
    const std::vector<float> part = fma_product(x, T, w.view, N, b, e);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = b; n < e; ++n) pieces[t * N + n] = part[t * N + n];
    }
  }
  EXPECT_EQ(std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)), 0);
  // The first 17 tokens alone: the same bits as among 48.
  const std::vector<float> fewer = fma_product(x, 17, w.view, N, 0, N);
  EXPECT_EQ(std::memcmp(whole.data(), fewer.data(), fewer.size() * sizeof(float)), 0);
}

// The FMA decode kernel gives the vdpbf16ps decode kernel's bits where it runs (Intel): every token
// count below 16, K with and without partial chunks, row ranges.
TEST(KernelsBf16Fma, DecodeGivesTheDotProductKernelsBits) {
  if (!has_avx512_kernels()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 kernels";
  const int64_t N = 23;
  for (int64_t K : {1, 31, 33, 64, 100, 576}) {
    auto w = make_weights(random_floats(N * K, 61), N, K, DType::BF16);
    for (int64_t T : {1, 2, 3, 4, 5, 6, 9, 15}) {
      SCOPED_TRACE("K=" + std::to_string(K) + " T=" + std::to_string(T));
      auto x = random_floats(T * K, 62);
      std::vector<float> pairs(static_cast<size_t>(avx512::bf16_prepared_floats(T, K)));
      avx512::bf16_prepare(x.data(), T, K, 0, T, pairs.data());
      std::vector<float> widened(static_cast<size_t>(avx512::bf16_widened_floats(T, K)));
      avx512::bf16_prepare_widened(x.data(), K, 0, T, widened.data());
      std::vector<float> dot(static_cast<size_t>(T * N)), fma(dot.size(), -7.0f);
      avx512::bf16_matmul_prepared(pairs.data(), T, w.view, dot.data(), N, 0, N);
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 7}, {7, 8}, {8, N}}) {
        avx512::bf16_gemv_fma(widened.data(), T, w.view, fma.data(), N, b, e);
      }
      if (avx512::bf16_prefill_uses_fma()) {  // Intel: vdpbf16ps adds the odd product first
        EXPECT_EQ(std::memcmp(dot.data(), fma.data(), dot.size() * sizeof(float)), 0);
      } else {  // elsewhere the instruction's order is not documented: the same sums
        std::vector<float> row(static_cast<size_t>(K));
        for (int64_t n = 0; n < N; ++n) {
          reference::dequantize_row(w.view, n, row.data());
          for (int64_t t = 0; t < T; ++t) {
            double magnitude = 0;
            for (int64_t k = 0; k < K; ++k) magnitude += std::fabs(double{x[t * K + k]} * row[k]);
            ASSERT_NEAR(fma[t * N + n], dot[t * N + n], 1e-5 * magnitude + 1e-30);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember::cpu
