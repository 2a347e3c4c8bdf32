// How CpuBackend::matmul divides a prefill between threads: 16-token groups per thread while the
// matrices of a call are small (kTokenSplitMaxBytes, 8 MiB), output rows once they are larger (each
// weight then read once, not once per thread and piece). Either way the product must be the one a
// single thread computes over every token and row, bit for bit (T >= 16 keeps one accumulation
// order per (row, token) in every kernel), and the exact product within the activations' rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/core/dequantize.h"
#include "ember/core/dtype.h"
#include "ember/core/quantize.h"
#include "kernels_test_util.h"

namespace ember {
namespace {

using test::random_floats;

struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored bytes hold, as floats
  WeightMatrix view;
};

Matrix make_matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m;
  m.values = random_floats(rows * cols, seed);
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    convert_row(m.values.data() + r * cols, dtype, m.bytes.data() + r * row_bytes, cols);
    dequantize_row(dtype, m.bytes.data() + r * row_bytes, m.values.data() + r * cols, cols);
  }
  m.view = {dtype, m.bytes.data(), rows, cols, row_bytes};
  return m;
}

// y [T, N] for each matrix of `ws` (sharing the input x [T, K]) on a cpu backend of `threads`.
std::vector<std::vector<float>> run(int threads, const std::vector<const Matrix*>& ms,
                                    const std::vector<float>& x, int64_t T) {
  BackendOptions o;
  o.name = "cpu";
  o.n_threads = threads;
  auto backend = make_backend(o);
  std::vector<WeightMatrix> ws;
  for (const Matrix* m : ms) ws.push_back(backend->upload_matrix(m->view, false));
  Activations in, out;
  backend->reserve(in, static_cast<int64_t>(x.size()));
  backend->from_host(in.data(), x.data(), static_cast<int64_t>(x.size()));
  int64_t total = 0;
  for (const Matrix* m : ms) total += T * m->view.n_rows;
  backend->reserve(out, total);
  std::vector<const WeightMatrix*> w_ptrs;
  std::vector<float*> y_ptrs;
  int64_t at = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    w_ptrs.push_back(&ws[i]);
    y_ptrs.push_back(out.data() + at);
    at += T * ws[i].n_rows;
  }
  backend->matmul(in.data(), T, w_ptrs, y_ptrs);
  std::vector<std::vector<float>> ys;
  for (size_t i = 0; i < ws.size(); ++i) {
    ys.emplace_back(y_ptrs[i], y_ptrs[i] + T * ws[i].n_rows);
  }
  return ys;
}

TEST(CpuBackendMatmulSplit, LargeAndSmallMatricesGiveOneThreadsProductOnTwoAndThree) {
  const int64_t K = 1024, T = 80;  // 5 token groups: the last thread's piece is partial
  for (DType dtype : {DType::BF16, DType::F32}) {
    // Small: 64 + 32 + 40 rows (0.3 MB in bf16, split over tokens). Large: 2,880 + 1,440 + 40 rows
    // (8.9 MB in bf16, 17.9 in f32: split over rows).
    for (int64_t rows : {64, 2880}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " rows=" + std::to_string(rows));
      const Matrix a = make_matrix(dtype, rows, K, 1), b = make_matrix(dtype, rows / 2, K, 2),
                   c = make_matrix(dtype, 40, K, 3);
      const std::vector<const Matrix*> ms = {&a, &b, &c};
      const std::vector<float> x = random_floats(T * K, 4);
      const auto one = run(1, ms, x, T);
      for (int threads : {2, 3}) {
        const auto many = run(threads, ms, x, T);
        for (size_t i = 0; i < ms.size(); ++i) {
          ASSERT_EQ(many[i].size(), one[i].size());
          EXPECT_EQ(std::memcmp(many[i].data(), one[i].data(), one[i].size() * sizeof(float)), 0)
              << "matrix " << i << ", " << threads << " threads";
        }
      }
      // And the product itself (bf16 rounds the activations on AVX-512: within 1e-2).
      for (size_t i = 0; i < ms.size(); ++i) {
        const Matrix& m = *ms[i];
        const int64_t N = m.view.n_rows;
        double worst = 0, scale = 0;
        for (int64_t t = 0; t < T; t += 7) {
          for (int64_t n = 0; n < N; n += 5) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
              s += static_cast<double>(x[t * K + k]) * m.values[n * K + k];
            }
            worst = std::max(worst, std::fabs(one[i][t * N + n] - s));
            scale = std::max(scale, std::fabs(s));
          }
        }
        EXPECT_LE(worst / scale, 1e-2) << "matrix " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ember
