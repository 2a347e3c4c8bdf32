// matmul for every weight dtype and every ISA the CPU runs, against the double-precision
// reference on the same stored weights, plus the determinism contract of kernels.h.
//
// Tolerance: |y - ref| <= 1e-5 * sum_k |x_k * w_k|, where w is the weight as stored (f16/bf16
// converted, q8_0/q4_0 dequantized). The kernels compute in f32 on exactly those weight values, so
// the only error is f32 accumulation; the quantization error itself is tested in
// kernels_quantize_test.cpp. The one exception is bf16 under AVX-512 (vdpbf16ps), which rounds the
// activations to bf16 too: 2^-8 * sum_k |x_k * w_k| (rounding error <= 2^-9 per product, plus
// accumulation), and it equals the f32 product of the rounded activations within 1e-5 (tested
// below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::IsaScope;
using test::make_weights;
using test::random_floats;
using test::supported_isas;

constexpr DType kAllDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

std::vector<int64_t> test_ks(DType dtype) {
  if (dtype_is_quantized(dtype)) return {32, 64, 576, 1536};
  return {1, 8, 67, 173, 576};
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Checks y [T, ldy] against the reference within `tolerance` * sum |x w|.
void expect_close_to_reference(const std::vector<float>& x, int64_t T, const WeightMatrix& w,
                               const std::vector<float>& y, int64_t ldy, double tolerance = 1e-5) {
  const int64_t N = w.n_rows, K = w.n_cols;
  std::vector<float> ref_y(static_cast<size_t>(T * N));
  reference::matmul(x.data(), T, w, ref_y.data(), N, 0, N);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    reference::dequantize_row(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) magnitude += std::fabs(double{x[t * K + k]} * row[k]);
      ASSERT_NEAR(y[t * ldy + n], ref_y[t * N + n], tolerance * magnitude + 1e-30)
          << "t=" << t << " n=" << n << " K=" << K;
    }
  }
}

TEST(KernelsMatmul, MatchesReferenceEveryDtypeAndIsa) {
  const int64_t N = 37;  // odd: leftover rows after every tile and panel shape
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kAllDtypes) {
      for (int64_t K : test_ks(dtype)) {
        for (int64_t T : {1, 3, 4, 6, 11, 17, 24, 29, 70}) {  // >= 16: the token-group GEMM
          SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                       " K=" + std::to_string(K) + " T=" + std::to_string(T));
          auto wv = random_floats(N * K, 1000 + static_cast<uint32_t>(K));
          auto w = make_weights(wv, N, K, dtype);
          auto x = random_floats(T * K, 7 + static_cast<uint32_t>(T));
          const int64_t ldy = N + 3;  // a leading dimension wider than N
          std::vector<float> y(static_cast<size_t>(T * ldy), -123.0f);
          matmul(x.data(), T, w.view, y.data(), ldy, 0, N);
          expect_close_to_reference(
              x, T, w.view, y, ldy,
              test::rounds_activations_to_bf16(isa, dtype) ? 1.0 / 256 : 1e-5);
          for (int64_t t = 0; t < T; ++t) {  // the padding columns are left alone
            for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[t * ldy + n], -123.0f);
          }
        }
      }
    }
  }
}

// The AVX-512 bf16 kernels equal the product of the bf16-rounded activations (round to nearest
// even) and the weights up to f32 summation: the rounding is all that differs from the other ISAs.
// Odd K, K past one 32-value chunk and both token ranges (decode tiles, token-lane GEMM).
TEST(KernelsMatmul, Bf16UnderAvx512IsTheProductOfRoundedActivations) {
  const int64_t N = 21;
  bool ran = false;
  for (Isa isa : supported_isas()) {
    if (!test::rounds_activations_to_bf16(isa, DType::BF16)) continue;
    ran = true;
    IsaScope scope(isa);
    for (int64_t K : {1, 31, 33, 67, 576}) {
      for (int64_t T : {1, 2, 5, 16, 35}) {
        SCOPED_TRACE("K=" + std::to_string(K) + " T=" + std::to_string(T));
        auto w = make_weights(random_floats(N * K, 31), N, K, DType::BF16);
        auto x = random_floats(T * K, 32);
        std::vector<float> rounded(x.size());
        for (size_t i = 0; i < x.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
        std::vector<float> y(static_cast<size_t>(T * N));
        matmul(x.data(), T, w.view, y.data(), N, 0, N);
        expect_close_to_reference(rounded, T, w.view, y, N);
        // And the rounding shows: against the unrounded activations some output is off by more
        // than the f32 bound (else this test could not tell the paths apart).
        std::vector<float> exact(y.size());
        reference::matmul(x.data(), T, w.view, exact.data(), N, 0, N);
        if (K >= 33) {
          double worst = 0;
          for (size_t i = 0; i < y.size(); ++i)
            worst = std::max(worst, double{std::fabs(y[i] - exact[i])});
          EXPECT_GT(worst, 1e-5);
        }
      }
    }
  }
  if (!ran) GTEST_SKIP() << "this CPU has no AVX-512 BF16 kernels";
}

// Any split into row ranges, in any order, gives the bits of one call over all rows.
// f32/f16 weights from 16 tokens on: on Intel the AVX-512 set runs the tokens-in-lanes GEMM on zmm
// (avx512_panel_lanes.cpp), every lane summing over k in the order the AVX2 tile does, so the two
// sets give the same bits (elsewhere both run the AVX2 tile). Odd N and K, tokens past a group.
TEST(KernelsMatmul, FloatGemmUnderAvx512GivesTheAvx2Bits) {
  const auto isas = supported_isas();
  if (std::find(isas.begin(), isas.end(), Isa::Avx512) == isas.end()) {
    GTEST_SKIP() << "this CPU has no AVX-512 kernels";
  }
  const int64_t N = 53;  // 2 panels of 24, the second with 12 + 5 leftover rows on zmm
  for (DType dtype : {DType::F32, DType::F16}) {
    for (int64_t K : {1, 67, 576}) {
      for (int64_t T : {16, 35, 70}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " K=" + std::to_string(K) +
                     " T=" + std::to_string(T));
        auto w = make_weights(random_floats(N * K, 61), N, K, dtype);
        auto x = random_floats(T * K, 62);
        std::vector<float> y2(static_cast<size_t>(T * N)), y512(y2.size());
        {
          IsaScope scope(Isa::Avx2);
          matmul(x.data(), T, w.view, y2.data(), N, 0, N);
        }
        {
          IsaScope scope(Isa::Avx512);
          matmul(x.data(), T, w.view, y512.data(), N, 0, N);
        }
        for (size_t i = 0; i < y2.size(); ++i) ASSERT_TRUE(same_bits(y2[i], y512[i])) << i;
      }
    }
  }
}

// Any split of the rows gives the same bits, decode (T < 16) and prefill alike.
TEST(KernelsMatmul, RowSplitsAreBitIdentical) {
  const int64_t N = 53;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kAllDtypes) {
      for (int64_t T : {1, 3, 6, 17}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                     " T=" + std::to_string(T));
        const int64_t K = dtype_is_quantized(dtype) ? 96 : 173;
        auto w = make_weights(random_floats(N * K, 5), N, K, dtype);
        auto x = random_floats(T * K, 6);
        std::vector<float> whole(static_cast<size_t>(T * N)), split(whole.size());
        matmul(x.data(), T, w.view, whole.data(), N, 0, N);
        const int64_t cuts[] = {0, 1, 4, 5, 13, 14, 30, 39, 40, 52, 53};
        for (size_t i = std::size(cuts) - 1; i > 0; --i) {  // back to front, for good measure
          matmul(x.data(), T, w.view, split.data(), N, cuts[i - 1], cuts[i]);
        }
        for (size_t i = 0; i < whole.size(); ++i) ASSERT_TRUE(same_bits(whole[i], split[i])) << i;
      }
    }
  }
}

// Row t of a T-token call equals a 1-token call on x[t] bit for bit, for every T < 16 (the
// kernels that keep k in the SIMD lanes).
TEST(KernelsMatmul, BatchRowsMatchSingleTokenBitExactly) {
  const int64_t N = 29;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kAllDtypes) {
      const int64_t K = dtype_is_quantized(dtype) ? 64 : 67;
      auto w = make_weights(random_floats(N * K, 11), N, K, dtype);
      for (int64_t T : {2, 3, 4, 5, 6, 7, 9, 15}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                     " T=" + std::to_string(T));
        auto x = random_floats(T * K, 12);
        std::vector<float> batch(static_cast<size_t>(T * N)), single(static_cast<size_t>(N));
        matmul(x.data(), T, w.view, batch.data(), N, 0, N);
        for (int64_t t = 0; t < T; ++t) {
          matmul(x.data() + t * K, 1, w.view, single.data(), N, 0, N);
          for (int64_t n = 0; n < N; ++n) {
            ASSERT_TRUE(same_bits(batch[t * N + n], single[n])) << "t=" << t << " n=" << n;
          }
        }
      }
    }
  }
}

// Below kGemmMinTokens quantized weights multiply 8-bit activations: the result equals the f32
// product of the dequantized weights and the dequantized activations (up to float summation
// order), and stays within the activation quantization error of the plain f32 product.
TEST(KernelsMatmul, QuantizedEqualsF32OnDequantizedWeightsAndActivations) {
  const int64_t N = 19, K = 576, T = 6;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype));
      auto q = make_weights(random_floats(N * K, 21), N, K, dtype);
      std::vector<float> deq(static_cast<size_t>(N * K));
      for (int64_t n = 0; n < N; ++n) reference::dequantize_row(q.view, n, deq.data() + n * K);
      auto f = make_weights(deq, N, K, DType::F32);
      auto x = random_floats(T * K, 22);
      std::vector<BlockQ8Act> xq(static_cast<size_t>(T * K / 32));
      quantize_activations(x.data(), T, K, xq.data());
      std::vector<BlockQ8Act> xq_ref(xq.size());
      reference::quantize_activations(x.data(), T, K, xq_ref.data());
      std::vector<float> x_deq(x.size());
      for (size_t b = 0; b < xq.size(); ++b) {
        ASSERT_EQ(xq[b].d, xq_ref[b].d) << b;
        ASSERT_EQ(xq[b].sum, xq_ref[b].sum) << b;
        for (int i = 0; i < 32; ++i) {
          ASSERT_EQ(xq[b].qs[i], xq_ref[b].qs[i]) << b << " " << i;
          x_deq[b * 32 + i] = xq[b].d * xq[b].qs[i];
        }
      }
      std::vector<float> yq(static_cast<size_t>(T * N)), yf(yq.size()), yx(yq.size());
      matmul(x.data(), T, q.view, yq.data(), N, 0, N);
      reference::matmul(x_deq.data(), T, f.view, yf.data(), N, 0, N);
      reference::matmul(x.data(), T, f.view, yx.data(), N, 0, N);
      double scale = 0;
      for (float v : yf) scale = std::max(scale, std::fabs(static_cast<double>(v)));
      for (size_t i = 0; i < yq.size(); ++i) {
        ASSERT_NEAR(yq[i], yf[i], 1e-5 * scale) << i;
        ASSERT_NEAR(yq[i], yx[i], 2e-2 * scale) << i;  // 8-bit activations: ~1/254 per element
      }
    }
  }
}

// From kGemmMinTokens on quantized weights in the Rows layout are expanded to exact f32 values and
// run the float GEMM on f32 activations: a q8_0/q4_0 matmul equals the f32 matmul on the
// dequantized matrix bit for bit (same ISA), and the 8-bit activation error is gone.
TEST(KernelsMatmul, QuantizedGemmEqualsF32OnDequantizedWeights) {
  const int64_t N = 43, K = 576;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : {DType::Q8_0, DType::Q4_0}) {
      auto q = make_weights(random_floats(N * K, 23), N, K, dtype);
      std::vector<float> deq(static_cast<size_t>(N * K));
      for (int64_t n = 0; n < N; ++n) reference::dequantize_row(q.view, n, deq.data() + n * K);
      auto f = make_weights(deq, N, K, DType::F32);
      for (int64_t T : {kGemmMinTokens, kGemmMinTokens + 5, int64_t{64}}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                     " T=" + std::to_string(T));
        ASSERT_FALSE(uses_8bit_activations(q.view, T));
        auto x = random_floats(T * K, 24);
        std::vector<float> yq(static_cast<size_t>(T * N)), yf(yq.size());
        matmul(x.data(), T, q.view, yq.data(), N, 0, N);
        matmul(x.data(), T, f.view, yf.data(), N, 0, N);
        for (size_t i = 0; i < yq.size(); ++i) ASSERT_TRUE(same_bits(yq[i], yf[i])) << i;
      }
    }
  }
}

// Several threads on disjoint row ranges of one output (as the model calls it) match one call.
TEST(KernelsMatmul, ConcurrentRowRangesMatchOneCall) {
  const int64_t N = 301, K = 576, T = 7;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : {DType::BF16, DType::Q4_0}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype));
      auto w = make_weights(random_floats(N * K, 31), N, K, dtype);
      auto x = random_floats(T * K, 32);
      std::vector<float> whole(static_cast<size_t>(T * N)), parts(whole.size());
      matmul(x.data(), T, w.view, whole.data(), N, 0, N);
      std::vector<std::thread> threads;
      const int64_t n_threads = 4;
      for (int64_t i = 0; i < n_threads; ++i) {
        threads.emplace_back([&, i] {
          matmul(x.data(), T, w.view, parts.data(), N, N * i / n_threads, N * (i + 1) / n_threads);
        });
      }
      for (auto& th : threads) th.join();
      for (size_t i = 0; i < whole.size(); ++i) ASSERT_TRUE(same_bits(whole[i], parts[i])) << i;
    }
  }
}

// From 16 tokens on, every weight dtype runs the token-group GEMM: every T >= 16 gives row t the
// same bits as any other T >= 16 (whole and partial groups alike), and stays within float
// reassociation of the single-token result (quantized weights: within the 8-bit activation error,
// which the single-token call has and the GEMM has not).
TEST(KernelsMatmul, TokenGroupRowsDoNotDependOnT) {
  const int64_t N = 41, T_max = 45;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kAllDtypes) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype));
      const int64_t K = dtype_is_quantized(dtype) ? 192 : 200;
      auto w = make_weights(random_floats(N * K, 41), N, K, dtype);
      auto x = random_floats(T_max * K, 42);
      std::vector<float> full(static_cast<size_t>(T_max * N)), part(full.size());
      std::vector<float> single(static_cast<size_t>(N));
      matmul(x.data(), T_max, w.view, full.data(), N, 0, N);
      for (int64_t T : {16, 17, 24, 32, 33}) {
        matmul(x.data(), T, w.view, part.data(), N, 0, N);
        for (int64_t i = 0; i < T * N; ++i) {
          ASSERT_TRUE(same_bits(part[i], full[i])) << "T=" << T << " i=" << i;
        }
      }
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t t : {0, 15, 44}) {
        matmul(x.data() + t * K, 1, w.view, single.data(), N, 0, N);
        const float* xt = x.data() + t * K;
        for (int64_t n = 0; n < N; ++n) {
          // 8-bit activations move each x_k by at most half a step, max|x of its block| / 254.
          double activation_error = 0.0;
          if (dtype_is_quantized(dtype)) {
            reference::dequantize_row(w.view, n, row.data());
            for (int64_t k = 0; k < K; ++k) {
              float block_max = 0.0f;
              for (int64_t i = k / 32 * 32; i < k / 32 * 32 + 32; ++i)
                block_max = std::max(block_max, std::fabs(xt[i]));
              activation_error += std::fabs(row[k]) * block_max / 254.0;
            }
          }
          ASSERT_NEAR(full[t * N + n], single[n],
                      activation_error + 1e-4 * (1 + std::fabs(single[n])))
              << "t=" << t << " n=" << n;
        }
      }
    }
  }
}

// Activations prepared once (in token ranges split at kPreparedTokenGrain, as the threads of the
// forward pass do it) give matmul_prepared the bits of a plain matmul.
TEST(KernelsMatmul, PreparedActivationsMatchPlainMatmul) {
  const int64_t N = 30;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kAllDtypes) {
      const int64_t K = dtype_is_quantized(dtype) ? 96 : 100;
      auto w = make_weights(random_floats(N * K, 51), N, K, dtype);
      for (int64_t T : {1, 5, 16, 37}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                     " T=" + std::to_string(T));
        auto x = random_floats(T * K, 52);
        std::vector<float> xp(static_cast<size_t>(prepared_activation_floats(dtype, T, K)), 9.0f);
        for (int64_t b = 0; b < T; b += kPreparedTokenGrain) {  // back to front is fine too
          prepare_activations(dtype, x.data(), T, K, b, std::min(T, b + kPreparedTokenGrain),
                              xp.data());
        }
        std::vector<float> plain(static_cast<size_t>(T * N)), prepared(plain.size());
        matmul(x.data(), T, w.view, plain.data(), N, 0, N);
        matmul_prepared(xp.data(), T, w.view, prepared.data(), N, 0, N);
        for (size_t i = 0; i < plain.size(); ++i) {
          ASSERT_TRUE(same_bits(plain[i], prepared[i])) << i;
        }
      }
    }
  }
}

TEST(KernelsMatmul, EmptyRangeWritesNothing) {
  auto w = make_weights(random_floats(4 * 32, 1), 4, 32, DType::Q8_0);
  auto x = random_floats(32, 2);
  float y[4] = {5, 5, 5, 5};
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    matmul(x.data(), 1, w.view, y, 4, 2, 2);
    matmul(x.data(), 0, w.view, y, 4, 0, 4);
    for (float v : y) EXPECT_EQ(v, 5.0f);
  }
}

TEST(KernelsDispatch, ForcedIsaFallsBackAndRestores) {
  const Isa saved = active_isa();
  force_isa(Isa::Scalar);
  EXPECT_EQ(active_isa(), Isa::Scalar);
  // AVX-512 runs only where the CPU has every feature its kernels use; elsewhere the best below.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16") &&
                      __builtin_cpu_supports("avx512vnni");
  force_isa(Isa::Avx512);
  EXPECT_EQ(active_isa(), avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::Scalar);
  force_isa(Isa::Avx2);
  EXPECT_EQ(active_isa(), avx2 ? Isa::Avx2 : Isa::Scalar);
  force_isa(saved);
  EXPECT_EQ(active_isa(), saved);
  EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
}

}  // namespace
}  // namespace ember::cpu
