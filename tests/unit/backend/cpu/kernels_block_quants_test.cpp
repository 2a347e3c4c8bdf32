// The block types beyond q8_0/q4_0 (core/quant_blocks.h) in the cpu kernels: every ISA's row dot
// against the exact scalar one, every panel dequantizer against the format's definition
// (core/dequantize.cpp) bit for bit, and the whole matmul (decode and prefill paths) against the
// reference backend. Weights are random bytes with sane scales, plus the edges: zero scales, every
// quant at its maximum or minimum, and row counts that no tile shape divides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/dequantize.h"
#include "ember/core/half.h"
#include "ember/core/quant_blocks.h"
#include "kernels_test_util.h"

namespace ember {
namespace {

constexpr DType kBlockTypes[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1,   DType::Q8_1,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                                 DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};

// Byte offsets of each block's f16 scale fields (the rest of a block is any bits).
std::vector<int> half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q8_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    case DType::IQ4_XS:
    case DType::Q5_0:
    case DType::IQ4_NL:
      return {0};
    default:
      return {};  // q8_k: an f32 scale, set below
  }
}

// AllOnes / AllZeros / Bytes80: every quant byte 0xff / 0x00 / 0x80 (q8_1: -1, 0, -128).
enum class Fill { Random, ZeroScales, AllOnes, AllZeros, Bytes80 };

// n_rows x K of `dtype`: random quant bits, scales in [-0.05, 0.05] (mins likewise).
std::vector<uint8_t> make_rows(DType dtype, int64_t n_rows, int64_t K, Fill fill, uint32_t seed) {
  const int64_t bytes = n_rows * dtype_row_bytes(dtype, K);
  const int64_t block_bytes = dtype_block_bytes(dtype);
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  std::mt19937 rng(seed);
  for (auto& b : v) {
    b = fill == Fill::AllOnes    ? 0xff
        : fill == Fill::AllZeros ? 0
        : fill == Fill::Bytes80  ? 0x80
                                 : static_cast<uint8_t>(rng());
  }
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t at = 0; at < bytes; at += block_bytes) {
    for (int off : half_fields(dtype)) {
      const uint16_t h = f32_to_f16(fill == Fill::ZeroScales ? 0.0f : scale(rng));
      std::memcpy(&v[static_cast<size_t>(at + off)], &h, 2);
    }
    if (dtype == DType::Q8_K) {
      const float d = fill == Fill::ZeroScales ? 0.0f : scale(rng);
      std::memcpy(&v[static_cast<size_t>(at)], &d, 4);
    }
  }
  return v;
}

std::vector<cpu::BlockQ8Act> activations(int64_t T, int64_t K, uint32_t seed) {
  const auto x = test::random_floats(T * K, seed, -2.0f, 2.0f);
  std::vector<cpu::BlockQ8Act> xq(static_cast<size_t>(T * K / kQuantBlock));
  reference::quantize_activations(x.data(), T, K, xq.data());
  return xq;
}

// The sum of |w * x| over the row: the scale a float reassociation error is relative to.
double magnitude(DType dtype, const uint8_t* row, const cpu::BlockQ8Act* x, int64_t K) {
  std::vector<float> w(static_cast<size_t>(K));
  dequantize_row(dtype, row, w.data(), K);
  double m = 0;
  for (int64_t k = 0; k < K; ++k) {
    m += std::fabs(w[k] * x[k / kQuantBlock].d * x[k / kQuantBlock].qs[k % kQuantBlock]);
  }
  return m;
}

// The AVX2 row dot of kRows rows of `dtype` against the exact one, activations x (K values).
void expect_row_dots_match(DType dtype, int64_t K, Fill fill, const cpu::BlockQ8Act* x) {
  constexpr int64_t kRows = 7;
  const cpu::QuantRowDot dot = cpu::avx2::quant_row_dot(dtype);
  if (dot == nullptr) return;  // runs the scalar dot
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " K " + std::to_string(K) + " fill " +
               std::to_string(int(fill)));
  const auto w = make_rows(dtype, kRows, K, fill, 11);
  const int64_t rb = dtype_row_bytes(dtype, K);
  for (int64_t r = 0; r < kRows; ++r) {
    const uint8_t* row = w.data() + r * rb;
    const double exact = cpu::scalar::quant_row_dot_exact(dtype, row, x, K);
    const double got = dot(row, x, K);
    EXPECT_NEAR(got, exact, 2e-6 * magnitude(dtype, row, x, K) + 1e-30) << "row " << r;
  }
}

TEST(KernelsBlockQuants, Avx2RowDotsMatchTheExactDot) {
  if (test::supported_isas().size() < 2) GTEST_SKIP() << "this CPU has no AVX2";
  constexpr int64_t K = 512;
  const auto x = activations(1, K, 12);
  for (DType dtype : kBlockTypes) {
    for (Fill fill : {Fill::Random, Fill::ZeroScales, Fill::AllOnes, Fill::AllZeros}) {
      expect_row_dots_match(dtype, K, fill, x.data());
    }
  }
}

// Block counts no unrolling divides (1, 3, 9 blocks of 32; 1, 3 super-blocks), and the integer
// limits: activations all +-127 against quant bytes 0x00, 0xff, 0x80 (q8_1's -128: |w| |x| pairs
// at 2 * 128 * 127, just under int16's limit).
TEST(KernelsBlockQuants, Avx2RowDotsOddBlockCountsAndIntegerLimits) {
  if (test::supported_isas().size() < 2) GTEST_SKIP() << "this CPU has no AVX2";
  for (DType dtype : kBlockTypes) {
    const bool super = dtype_block_elems(dtype) == kSuperBlock;
    for (int64_t K : super ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 288}) {
      const auto x = activations(1, K, 13);
      for (Fill fill : {Fill::Random, Fill::AllOnes}) {
        expect_row_dots_match(dtype, K, fill, x.data());
      }
      for (float sign : {1.0f, -1.0f}) {
        const std::vector<float> flat(static_cast<size_t>(K), sign);
        std::vector<cpu::BlockQ8Act> xq(static_cast<size_t>(K / kQuantBlock));
        reference::quantize_activations(flat.data(), 1, K, xq.data());
        for (Fill fill : {Fill::AllZeros, Fill::AllOnes, Fill::Bytes80}) {
          expect_row_dots_match(dtype, K, fill, xq.data());
        }
      }
    }
  }
}

TEST(KernelsBlockQuants, Avx2PanelDequantizersAreExact) {
  if (test::supported_isas().size() < 2) GTEST_SKIP() << "this CPU has no AVX2";
  constexpr int64_t kRows = 5;
  for (DType dtype : kBlockTypes) {
    for (int64_t K : {dtype_block_elems(dtype) == kSuperBlock ? 256 : 96, 768}) {
      for (Fill fill : {Fill::Random, Fill::AllOnes, Fill::AllZeros, Fill::Bytes80}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " K " + std::to_string(K) + " fill " +
                     std::to_string(int(fill)));
        const auto w = make_rows(dtype, kRows, K, fill, 21);
        const int64_t rb = dtype_row_bytes(dtype, K);
        const int64_t ldo = K + 8;
        std::vector<float> got(kRows * ldo), want(K);
        cpu::avx2::dequantize_rows(dtype, w.data(), rb, kRows, K, got.data(), ldo);
        for (int64_t r = 0; r < kRows; ++r) {
          dequantize_row(dtype, w.data() + r * rb, want.data(), K);
          ASSERT_EQ(std::memcmp(got.data() + r * ldo, want.data(), K * sizeof(float)), 0)
              << "row " << r;
        }
      }
    }
  }
}

// The dispatched matmul on every ISA, decode (T < 16: 8-bit activations) and prefill (T >= 16:
// f32 activations on dequantized panels), against the reference backend; 29 rows (no tile
// divides it) split in two calls.
TEST(KernelsBlockQuants, MatmulMatchesReferenceEveryIsaBothPaths) {
  constexpr int64_t K = 512, N = 29;
  for (DType dtype : kBlockTypes) {
    const auto bytes = make_rows(dtype, N, K, Fill::Random, 31);
    const cpu::WeightMatrix w{dtype, bytes.data(), N, K, dtype_row_bytes(dtype, K)};
    for (int64_t T : {1, 3, 20}) {
      const auto x = test::random_floats(T * K, 32, -1.0f, 1.0f);
      std::vector<float> want(T * N), got(T * N);
      reference::matmul(x.data(), T, w, want.data(), N, 0, N);
      double scale = 0;
      for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
      for (cpu::Isa isa : test::supported_isas()) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(T) + " " +
                     cpu::isa_name(isa));
        test::IsaScope scope(isa);
        std::fill(got.begin(), got.end(), 0.0f);
        cpu::matmul(x.data(), T, w, got.data(), N, 0, 13);
        cpu::matmul(x.data(), T, w, got.data(), N, 13, N);
        for (int64_t i = 0; i < T * N; ++i) ASSERT_NEAR(got[i], want[i], 1e-4 * scale) << i;
      }
    }
  }
}

}  // namespace
}  // namespace ember
