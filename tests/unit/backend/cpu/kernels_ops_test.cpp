// rmsnorm, rope, softmax, silu_mul, add_inplace and dequantize_row on every ISA the CPU runs,
// against the double-precision references. Tolerances are stated per test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/reference/reference_kernels.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::IsaScope;
using test::make_weights;
using test::random_floats;
using test::supported_isas;

// rmsnorm: relative 1e-5 (f32 sum of squares vs double).
TEST(KernelsOps, RmsnormMatchesReference) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (int64_t D : {1, 7, 8, 67, 576}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " D=" + std::to_string(D));
      const int64_t T = 3;
      auto x = random_floats(T * D, 1, -3.0f, 3.0f);
      auto w = random_floats(D, 2, 0.5f, 1.5f);
      std::vector<float> y(x.size()), want(x.size());
      rmsnorm(x.data(), w.data(), y.data(), T, D, 1e-5f);
      reference::rmsnorm(x.data(), w.data(), want.data(), T, D, 1e-5f);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7);
      rmsnorm(x.data(), w.data(), x.data(), T, D, 1e-5f);  // in place (x and y alias)
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(x[i], y[i]);
    }
  }
}

// rope: absolute 1e-5 on inputs in [-1, 1] (same float angle; f32 vs double cos/sin and products).
// Elements past rope_dim are left untouched.
TEST(KernelsOps, RopeMatchesReference) {
  struct Shape {
    int64_t n_heads, head_dim, rope_dim;
  };
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (Shape s : {Shape{3, 64, 64}, Shape{2, 64, 32}, Shape{5, 8, 8}, Shape{2, 26, 22}}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " head_dim=" + std::to_string(s.head_dim) +
                   " rope_dim=" + std::to_string(s.rope_dim));
      const int64_t T = 4;
      std::vector<int32_t> pos = {0, 1, 517, 4095};
      std::vector<float> inv_freq(static_cast<size_t>(s.rope_dim / 2));
      for (size_t i = 0; i < inv_freq.size(); ++i) {
        inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / s.rope_dim));
      }
      auto x = random_floats(T * s.n_heads * s.head_dim, 3);
      auto want = x;
      auto original = x;
      rope(x.data(), T, s.n_heads, s.head_dim, s.rope_dim, pos.data(), inv_freq.data());
      reference::rope(want.data(), T, s.n_heads, s.head_dim, s.rope_dim, pos.data(),
                      inv_freq.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(x[i], want[i], 1e-5) << i;
        if (static_cast<int64_t>(i) % s.head_dim >= s.rope_dim) {
          ASSERT_EQ(x[i], original[i]);
        }
      }
    }
  }
}

// softmax: relative 1e-5 per element (vector exp within ~2 ulp, f32 sum).
TEST(KernelsOps, SoftmaxMatchesReference) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 5, 8, 67, 1000}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
      auto x = random_floats(n, 4, -20.0f, 20.0f);
      if (n > 3) x[2] = -1e30f;  // underflows to 0
      auto want = x;
      softmax(x.data(), n);
      reference::softmax(want.data(), n);
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(x[i], want[i], 1e-5 * want[i] + 1e-30) << i;
        total += x[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

// silu_mul: relative 1e-5 (plus 1e-30 absolute for results that underflow).
TEST(KernelsOps, SiluMulMatchesReference) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 7, 8, 67, 1000}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
      auto g = random_floats(n, 5, -12.0f, 12.0f);
      auto u = random_floats(n, 6, -2.0f, 2.0f);
      if (n >= 7) {  // extremes: exp(-g) overflows / underflows
        g[0] = -100.0f;
        g[1] = 100.0f;
        g[2] = -88.5f;
        g[3] = 0.0f;
        g[4] = 87.0f;
      }
      std::vector<float> y(static_cast<size_t>(n)), want(y.size());
      silu_mul(g.data(), u.data(), y.data(), n);
      reference::silu_mul(g.data(), u.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(y[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30) << "g=" << g[i];
      }
    }
  }
}

TEST(KernelsOps, AddInplaceIsExact) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 9, 67}) {
      auto y = random_floats(n, 7);
      auto x = random_floats(n, 8);
      auto want = y;
      for (int64_t i = 0; i < n; ++i) want[i] += x[i];
      add_inplace(y.data(), x.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], want[i]);
    }
  }
}

// dequantize_row is an exact conversion: bit-identical to the reference for every dtype.
TEST(KernelsOps, DequantizeRowIsExact) {
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
      for (int64_t K : {32, 67, 576}) {
        if (dtype_is_quantized(dtype) && K % kQuantBlock != 0) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype) +
                     " K=" + std::to_string(K));
        const int64_t rows = 5;
        auto w = make_weights(random_floats(rows * K, 9, -4.0f, 4.0f), rows, K, dtype);
        std::vector<float> got(static_cast<size_t>(K + 1), 77.0f), want(static_cast<size_t>(K));
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(w.view, r, got.data());
          reference::dequantize_row(w.view, r, want.data());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), K * sizeof(float)), 0) << "row " << r;
          ASSERT_EQ(got[K], 77.0f);  // nothing written past the row
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember::cpu
