// Every op of every backend against the reference backend (or, for matmul, against an exact double
// product of the dequantized weights), through the Backend interface alone: the same test runs on
// cpu and, in builds with it, on cuda (skipped, saying why, without a GPU). Random inputs, odd
// sizes (K = 172, head_dim = 80, T around the matvec/GEMM switch), paged KV with shuffled block
// tables, two sequences in one batch, GQA, sliding window and soft-cap, f32 and f16 caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ember/backend/backend.h"
#ifdef EMBER_CUDA
#include "ember/backend/cuda/cuda_backend.h"
#endif
#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/core/quantize.h"
#include "test_util.h"

namespace ember {
namespace {

using test::random_floats;

// max |a - b| / max |b|, the measure every comparison here uses.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

// A backend plus helpers to move float arrays in and out of its memory.
struct Device {
  std::shared_ptr<Backend> backend;
  std::vector<std::unique_ptr<Activations>> buffers;
  std::vector<float> staging;

  explicit Device(const std::string& name) {
    BackendOptions o;
    o.name = name;
    backend = make_backend(o);
  }
  float* put(const std::vector<float>& host) {
    buffers.push_back(std::make_unique<Activations>());
    backend->reserve(*buffers.back(), static_cast<int64_t>(host.size()) + 1);
    backend->from_host(buffers.back()->data(), host.data(), static_cast<int64_t>(host.size()));
    return buffers.back()->data();
  }
  float* zeros(int64_t n) { return put(std::vector<float>(static_cast<size_t>(n), 0.0f)); }
  std::vector<float> get(const float* data, int64_t n) {
    auto s = backend->to_host(data, n, staging);
    return {s.begin(), s.end()};
  }
};

// A [rows, cols] matrix stored as `dtype` in the Rows layout, plus its exact float values.
struct HostMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized: what the product must use
  WeightMatrix view;
};

HostMatrix make_matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  HostMatrix m;
  const std::vector<float> src = random_floats(rows * cols, seed);
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  m.values.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = m.bytes.data() + r * row_bytes;
    if (dtype_is_super_block(dtype) ||
        (dtype_is_quantized(dtype) && dtype != DType::Q8_0 && dtype != DType::Q4_0)) {
      quantize_row_blocks(src.data() + r * cols, dtype, out, cols);
    } else {
      convert_row(src.data() + r * cols, dtype, out, cols);
    }
    dequantize_row(dtype, out, m.values.data() + r * cols, cols);
  }
  m.view = {dtype, m.bytes.data(), rows, cols, row_bytes};
  return m;
}

// Random Q [T, n_heads, hd], K and V [T, n_kv, hd] and a zeroed output like Q, on the device.
struct QkvBuffers {
  float* q;
  float* k;
  float* v;
  float* out;
};
QkvBuffers put_qkv(Device& d, int64_t T, int64_t n_heads, int64_t n_kv, int64_t hd,
                   uint32_t& seed) {
  QkvBuffers b{};
  b.q = d.put(random_floats(T * n_heads * hd, seed++));
  b.k = d.put(random_floats(T * n_kv * hd, seed++));
  b.v = d.put(random_floats(T * n_kv * hd, seed++));
  b.out = d.zeros(T * n_heads * hd);
  return b;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { EMBER_REQUIRE_BACKEND(GetParam()); }
};

struct MatmulCase {
  DType dtype;
  int64_t K;
};

TEST_P(BackendOps, MatmulMatchesExactProductForEveryDtypeAndTokenCount) {
  Device dev(GetParam());
  const int64_t N = 40;
  const MatmulCase cases[] = {{DType::F32, 172},  {DType::F32, 256},  {DType::F16, 172},
                              {DType::F16, 256},  {DType::BF16, 172}, {DType::BF16, 512},
                              {DType::Q8_0, 256}, {DType::Q4_0, 256}, {DType::Q4_1, 96},
                              {DType::Q5_0, 160}, {DType::Q5_1, 96},  {DType::IQ4_NL, 128},
                              {DType::Q2_K, 256}, {DType::Q3_K, 512}, {DType::Q4_K, 256},
                              {DType::Q5_K, 512}, {DType::Q6_K, 512}, {DType::IQ4_XS, 256}};
  uint32_t seed = 1;
  for (const MatmulCase& c : cases) {
    const HostMatrix m = make_matrix(c.dtype, N, c.K, seed++);
    const WeightMatrix w = dev.backend->upload_matrix(m.view, /*host_is_file=*/false);
    for (int64_t T : {1, 3, 8, 9, 40}) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " K=" + std::to_string(c.K) +
                   " T=" + std::to_string(T));
      const std::vector<float> x = random_floats(T * c.K, seed++);
      std::vector<float> exact(static_cast<size_t>(T * N));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += static_cast<double>(x[t * c.K + k]) * m.values[n * c.K + k];
          exact[t * N + n] = static_cast<float>(s);
        }
      }
      float* dx = dev.put(x);
      float* dy = dev.zeros(T * N);
      dev.backend->matmul(dx, T, {&w}, {dy});
      // Activations rounded to 8 bits (cpu, quantized weights) or to bf16 (cuda's GEMM on tensor
      // cores above 8 tokens; the cpu's AVX-512 bf16 kernels) cost up to ~1e-2; f32 weights, and
      // cuda's matvec (every block type decoded exactly, f32 activations), agree to rounding.
      const bool cuda_matvec = GetParam() == "cuda" && T <= 8;
      const bool exact_path = c.dtype == DType::F32 || cuda_matvec;
      EXPECT_LE(relative_error(dev.get(dy, T * N), exact), exact_path ? 2e-5 : 1.5e-2);
    }
  }
}

// A residual add right after a matmul (the decoder's o_proj / down_proj + residual): cuda folds
// the add into its matvec; both the product and the sum must stay what the reference computes.
// The mixture-of-experts ops: zero(), then each expert's outputs added into its tokens' rows with
// their router weights (rows repeating: a token's k experts).
TEST_P(BackendOps, ZeroAndScatterAddRowsMatchTheirDefinition) {
  Device dev(GetParam());
  // y[rows[r]] += s[r] * x[r], after zero().
  const int64_t D = 5;
  const std::vector<int32_t> rows = {2, 0, 2, 1, 0};
  const std::vector<float> scales = {0.5f, 2.0f, -1.0f, 1.0f, 0.25f};
  const std::vector<float> x = random_floats(5 * D, 77);
  float* dy = dev.put(random_floats(3 * D, 78));
  dev.backend->zero(dy, 3, D);
  dev.backend->scatter_add_rows(dev.put(x), D, rows, scales, dy);
  std::vector<float> want(3 * D, 0.0f);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t i = 0; i < D; ++i) want[rows[r] * D + i] += scales[r] * x[r * D + i];
  }
  EXPECT_LE(relative_error(dev.get(dy, 3 * D), want), 1e-6);
}

TEST_P(BackendOps, MatmulThenResidualAddMatchesReference) {
  Device dev(GetParam());
  Device ref("reference");
  const int64_t N = 48, K = 256;
  const HostMatrix m = make_matrix(DType::BF16, N, K, 31);
  for (int64_t T : {1, 3, 9}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = random_floats(T * K, 32);
    const std::vector<float> residual = random_floats(T * N, 33);
    auto run = [&](Device& d) {
      const WeightMatrix w = d.backend->upload_matrix(m.view, false);
      float* dx = d.put(x);
      float* product = d.zeros(T * N);
      float* sum = d.put(residual);
      d.backend->matmul(dx, T, {&w}, {product});
      d.backend->add(sum, product, T, N);
      d.backend->add(sum, product, T, N);  // a second add: not folded (the matvec is taken)
      std::vector<float> out = d.get(product, T * N);
      const std::vector<float> s2 = d.get(sum, T * N);
      out.insert(out.end(), s2.begin(), s2.end());
      return out;
    };
    // cuda's prefill and the cpu's AVX-512 and AMX kernels (vdpbf16ps, tdpbf16ps) round
    // activations to bf16.
    const std::string kernels = dev.backend->info().kernels;
    const bool bf16_activations =
        (GetParam() == "cuda" && T > 8) ||
        (GetParam() == "cpu" && (kernels == "avx512" || kernels == "amx"));
    EXPECT_LE(relative_error(run(dev), run(ref)), bf16_activations ? 1.5e-2 : 2e-5);
  }
}

// An RMSNorm whose output feeds a matmul (the decoder's norm before Q/K/V and gate/up): cuda folds
// the norm into its decode matvec, which must still write the normalized rows. Two q8_0 matrices
// of one launch, then a bf16 one (a second launch). The normalized rows are compared with the
// reference backend's, the products with exact double products of those rows.
TEST_P(BackendOps, RmsNormThenMatmulMatchesReference) {
  Device dev(GetParam());
  Device ref("reference");
  const int64_t K = 256;
  const HostMatrix mats[] = {make_matrix(DType::Q8_0, 40, K, 41),
                             make_matrix(DType::Q8_0, 24, K, 42),
                             make_matrix(DType::BF16, 16, K, 43)};
  const std::vector<float> norm_w = random_floats(K, 44, 0.5f, 1.5f);
  for (int64_t T : {1, 3, 9}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = random_floats(T * K, 45, -2.0f, 2.0f);
    // Returns the normalized rows, then each product.
    auto run = [&](Device& d) {
      std::vector<WeightMatrix> ws;
      for (const HostMatrix& m : mats) ws.push_back(d.backend->upload_matrix(m.view, false));
      const float* nw = d.backend->upload_vector(norm_w.data(), K);
      float* xn = d.zeros(T * K);
      std::vector<float*> ys;
      for (const HostMatrix& m : mats) ys.push_back(d.zeros(T * m.view.n_rows));
      d.backend->rmsnorm(d.put(x), nw, xn, T, K, 1e-5f);
      d.backend->matmul(xn, T, {&ws[0], &ws[1], &ws[2]}, {ys[0], ys[1], ys[2]});
      std::vector<std::vector<float>> out = {d.get(xn, T * K)};
      for (size_t i = 0; i < ys.size(); ++i) out.push_back(d.get(ys[i], T * mats[i].view.n_rows));
      return out;
    };
    const std::vector<std::vector<float>> got = run(dev);
    const std::vector<float> xn = run(ref)[0];
    EXPECT_LE(relative_error(got[0], xn), 2e-6);
    // cuda's decode matvec multiplies f32 activations; its prefill GEMMs and the cpu's kernels
    // round them (bf16, 8-bit).
    const bool rounded = (GetParam() == "cuda" && T > 8) || GetParam() == "cpu";
    for (size_t i = 0; i < std::size(mats); ++i) {
      const HostMatrix& m = mats[i];
      const int64_t N = m.view.n_rows;
      std::vector<float> exact(static_cast<size_t>(T * N));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          double sum = 0;
          for (int64_t k = 0; k < K; ++k)
            sum += static_cast<double>(xn[t * K + k]) * m.values[n * K + k];
          exact[t * N + n] = static_cast<float>(sum);
        }
      }
      EXPECT_LE(relative_error(got[i + 1], exact), rounded ? 1.5e-2 : 2e-5) << "matrix " << i;
    }
  }
}

#ifdef EMBER_CUDA
// cuda's decode matvec gives a warp 1, 2 or 4 rows of a matrix (cuda::matvec_rows_per_warp, by
// the launch's shape), with its first loads issued before or after the wait for the kernel
// before: each choice must give the exact products, with a norm folded in (three
// matrices of 43, 5 and 1 rows in one launch: row groups running past each matrix's end) and a
// residual add folded in, for every dtype the vector kernels take. K = 1,056 leaves a partial
// round of loads at the end of each row.
TEST_P(BackendOps, CudaMatvecRowsPerWarpAllGiveTheExactProduct) {
  if (GetParam() != "cuda") GTEST_SKIP() << "cuda's decode matvec kernels only";
  Device dev("cuda");
  const int64_t K = 1056;
  const int64_t rows[] = {43, 5, 1};
  const std::vector<float> norm_w = random_floats(K, 61, 0.5f, 1.5f);
  const float* nw = dev.backend->upload_vector(norm_w.data(), K);
  uint32_t seed = 62;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<HostMatrix> mats;
    std::vector<WeightMatrix> ws;
    for (int64_t n : rows) {
      mats.push_back(make_matrix(dtype, n, K, seed++));
      ws.push_back(dev.backend->upload_matrix(mats.back().view, false));
    }
    for (int64_t T : {1, 3, 8}) {
      const std::vector<float> x = random_floats(T * K, seed++, -2.0f, 2.0f);
      const std::vector<float> residual = random_floats(T * rows[0], seed++);
      std::vector<float> xn(x.size());  // the normalized rows, in double
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t k = 0; k < K; ++k) ss += static_cast<double>(x[t * K + k]) * x[t * K + k];
        const double inv = 1.0 / std::sqrt(ss / K + 1e-5);
        for (int64_t k = 0; k < K; ++k)
          xn[t * K + k] = static_cast<float>(x[t * K + k] * inv * norm_w[k]);
      }
      auto exact = [&](const std::vector<float>& in, size_t i) {
        const int64_t N = rows[i];
        std::vector<float> out(static_cast<size_t>(T * N));
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t n = 0; n < N; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k)
              sum += static_cast<double>(in[t * K + k]) * mats[i].values[n * K + k];
            out[t * N + n] = static_cast<float>(sum);
          }
        }
        return out;
      };
      for (int variant = 0; variant < 6; ++variant) {
        const int rows_per_warp = 1 << (variant / 2), early = variant % 2;
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T=" + std::to_string(T) +
                     " rows per warp " + std::to_string(rows_per_warp) + " early loads " +
                     std::to_string(early));
        cuda::set_matvec_rows_per_warp(rows_per_warp);
        cuda::set_matvec_early_loads(early);
        // Norm folded into the three products.
        float* dxn = dev.zeros(T * K);
        std::vector<float*> ys;
        for (int64_t n : rows) ys.push_back(dev.zeros(T * n));
        dev.backend->rmsnorm(dev.put(x), nw, dxn, T, K, 1e-5f);
        dev.backend->matmul(dxn, T, {&ws[0], &ws[1], &ws[2]}, {ys[0], ys[1], ys[2]});
        EXPECT_LE(relative_error(dev.get(dxn, T * K), xn), 2e-6);
        for (size_t i = 0; i < ws.size(); ++i)
          EXPECT_LE(relative_error(dev.get(ys[i], T * rows[i]), exact(xn, i)), 2e-5) << i;
        // Residual add folded into a product of x.
        float* product = dev.zeros(T * rows[0]);
        float* sum = dev.put(residual);
        dev.backend->matmul(dev.put(x), T, {&ws[0]}, {product});
        dev.backend->add(sum, product, T, rows[0]);
        std::vector<float> want = exact(x, 0);
        EXPECT_LE(relative_error(dev.get(product, T * rows[0]), want), 2e-5);
        for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
        EXPECT_LE(relative_error(dev.get(sum, T * rows[0]), want), 2e-5);
      }
    }
  }
  cuda::set_matvec_rows_per_warp(0);
  cuda::set_matvec_early_loads(1);
}
#endif

TEST_P(BackendOps, RowOpsMatchReference) {
  Device dev(GetParam());
  Device ref("reference");
  const int64_t rows = 5, D = 300;
  const std::vector<float> x = random_floats(rows * D, 11, -3.0f, 3.0f);
  const std::vector<float> y = random_floats(rows * D, 12, -3.0f, 3.0f);
  const std::vector<float> w = random_floats(D, 13, 0.5f, 1.5f);
  const std::vector<float> b = random_floats(D, 14);
  const float* dw = dev.backend->upload_vector(w.data(), D);
  const float* db = dev.backend->upload_vector(b.data(), D);
  const float* rw = ref.backend->upload_vector(w.data(), D);
  const float* rb = ref.backend->upload_vector(b.data(), D);
  const int64_t n = rows * D;
  auto compare = [&](const char* what, auto&& op) {
    SCOPED_TRACE(what);
    float* dout = dev.zeros(n);
    float* rout = ref.zeros(n);
    op(dev, dout, dw, db);
    op(ref, rout, rw, rb);
    EXPECT_LE(relative_error(dev.get(dout, n), ref.get(rout, n)), 2e-6);
  };
  compare("rmsnorm", [&](Device& d, float* out, const float* ww, const float*) {
    d.backend->rmsnorm(d.put(x), ww, out, rows, D, 1e-5f);
  });
  compare("layernorm", [&](Device& d, float* out, const float* ww, const float* bb) {
    d.backend->layernorm(d.put(x), ww, bb, out, rows, D, 1e-5f);
  });
  compare("silu_mul", [&](Device& d, float* out, const float*, const float*) {
    d.backend->silu_mul(d.put(x), d.put(y), out, rows, D);
  });
  compare("gelu_mul", [&](Device& d, float* out, const float*, const float*) {
    d.backend->gelu_mul(d.put(x), d.put(y), out, rows, D);
  });
  compare("gelu alone", [&](Device& d, float* out, const float*, const float*) {
    d.backend->gelu_mul(d.put(x), nullptr, out, rows, D);
  });
  compare("scale, softcap, add, add_bias",
          [&](Device& d, float* out, const float*, const float* bb) {
            d.backend->from_host(out, x.data(), n);
            d.backend->scale(out, 1.7f, rows, D);
            d.backend->softcap(out, 2.5f, rows, D);
            d.backend->add(out, d.put(y), rows, D);
            d.backend->add_bias(out, bb, rows, D);
          });
  const std::vector<int32_t> picked = {4, 0, 2};
  float* dout = dev.zeros(3 * D);
  dev.backend->gather_rows(dev.put(x), D, picked, dout);
  const std::vector<float> got = dev.get(dout, 3 * D);
  for (size_t r = 0; r < picked.size(); ++r) {
    EXPECT_TRUE(
        std::equal(got.begin() + r * D, got.begin() + (r + 1) * D, x.begin() + picked[r] * D));
  }
}

TEST_P(BackendOps, EmbeddingsAndPositionsMatchReferenceAndRefuseBadIds) {
  Device dev(GetParam());
  Device ref("reference");
  const int64_t V = 50, D = 64;
  const HostMatrix table = make_matrix(DType::Q8_0, V, D, 21);
  const HostMatrix pos_table = make_matrix(DType::F16, 16, D, 22);
  Batch batch;
  batch.tokens = {3, 49, 0, 17};
  std::vector<int32_t> blocks = {0};
  batch.sequences.push_back({blocks.data(), 5, 4});
  batch.finalize();
  auto run = [&](Device& d) {
    const WeightMatrix t = d.backend->upload_matrix(table.view, false);
    const WeightMatrix p = d.backend->upload_matrix(pos_table.view, false);
    float* x = d.zeros(4 * D);
    d.backend->embed(t, batch, x);
    d.backend->add_position_embeddings(p, batch, x);
    return d.get(x, 4 * D);
  };
  EXPECT_LE(relative_error(run(dev), run(ref)), 1e-7);
  const WeightMatrix t = dev.backend->upload_matrix(table.view, false);
  Batch bad = batch;
  bad.tokens[2] = 50;
  EXPECT_THROW(dev.backend->embed(t, bad, dev.zeros(4 * D)), Error);
}

struct AttentionCase {
  int64_t head_dim;
  DType kv_dtype;
  AttentionScores scores;
  int64_t chunk;  // tokens sequence A feeds in the compared step
};

// Two sequences: A has 9 cached positions and feeds a chunk; B has 21 and feeds 1. Block size 4;
// block ids shuffled over the pool. Positions before the step are written by a first step through
// the same ops, so both backends hold the same cache. Chunks of 16+ tokens take cuda's
// tensor-core tiles (f16 Q, K, P, V: agreement to ~1e-3); the rest agree to float rounding.
TEST_P(BackendOps, RopeKvAndAttentionMatchReference) {
  const AttentionCase cases[] = {{64, DType::F32, {0.125f}, 6},
                                 {80, DType::F16, {0.11f}, 6},
                                 {64, DType::F32, {0.125f, 5.0f, 7}, 6},
                                 {128, DType::F16, {0.088f, 0.0f, 16}, 6},
                                 {64, DType::F32, {0.125f}, 40},
                                 {128, DType::F16, {0.088f}, 90},
                                 {128, DType::F32, {0.088f, 0.0f, 23}, 70},
                                 {64, DType::F16, {0.125f, 4.0f, 0}, 33},
                                 {64, DType::Q8_0, {0.125f}, 6},
                                 {80, DType::Q4_0, {0.11f}, 40},
                                 {128, DType::BF16, {0.088f, 0.0f, 16}, 6},
                                 {64, DType::Q4_0, {0.125f, 4.0f, 0}, 33},
                                 {128, DType::Q8_0, {0.088f}, 1}};
  for (const AttentionCase& c : cases) {
    const bool quantized = c.kv_dtype == DType::Q8_0 || c.kv_dtype == DType::Q4_0;
    // The cuda backend stores f32 and f16 caches only (it refuses the others by name).
    if (GetParam() == "cuda" && c.kv_dtype != DType::F32 && c.kv_dtype != DType::F16) continue;
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " kv " + dtype_name(c.kv_dtype) +
                 " window " + std::to_string(c.scores.window) + " chunk " +
                 std::to_string(c.chunk));
    const int64_t n_heads = 4, n_kv = 2, hd = c.head_dim;
    KvShape shape;
    shape.n_layers = 2;
    shape.n_blocks = 64;
    shape.block_size = 4;
    shape.n_kv_heads = n_kv;
    shape.head_dim = hd;
    shape.set_dtype(c.kv_dtype);
    std::vector<int32_t> ids(64);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    std::vector<int32_t> table_a(ids.begin(), ids.begin() + 26);  // up to 9 + 90 positions
    std::vector<int32_t> table_b(ids.begin() + 26, ids.begin() + 32);
    std::vector<float> inv_freq(static_cast<size_t>(hd / 4));
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = std::pow(10000.0f, -2.0f * i / (hd / 2));

    auto make_batch = [&](int64_t a_start, int64_t a_n, int64_t b_start, int64_t b_n) {
      Batch batch;
      for (int64_t i = 0; i < a_n + b_n; ++i) batch.tokens.push_back(static_cast<int32_t>(i));
      batch.sequences.push_back({table_a.data(), a_start, a_n});
      batch.sequences.push_back({table_b.data(), b_start, b_n});
      batch.finalize();
      return batch;
    };
    const Batch fill = make_batch(0, 9, 0, 21);
    const Batch step = make_batch(9, c.chunk, 21, 1);

    auto run = [&](Device& d) {
      const float* freq =
          d.backend->upload_vector(inv_freq.data(), static_cast<int64_t>(inv_freq.size()));
      std::unique_ptr<KvStorage> kv = d.backend->allocate_kv(shape);
      std::vector<float> out_all;
      uint32_t seed = 100;
      for (const Batch* b : {&fill, &step}) {
        const int64_t T = b->size();
        const auto [q, k, v, out] = put_qkv(d, T, n_heads, n_kv, hd, seed);
        // Layer 1, with the rotary half covering half of head_dim (partial RoPE).
        d.backend->rope_store_kv(*kv, 1, q, k, v, n_heads, hd / 2, freq, *b);
        d.backend->attention(*kv, 1, q, n_heads, c.scores, *b, out);
        if (b != &step) continue;  // the fill only writes the cache (exactly, on every backend)
        const std::vector<float> o = d.get(out, T * n_heads * hd);
        const std::vector<float> qr = d.get(q, T * n_heads * hd);
        out_all.insert(out_all.end(), o.begin(), o.end());
        out_all.insert(out_all.end(), qr.begin(), qr.end());
      }
      return out_all;
    };
    Device dev(GetParam());
    Device ref("reference");
    // cuda's tensor cores and the cpu's AMX tiles (16+ tokens over a narrow cache) round Q, K, V
    // and the probabilities to bf16.
    const bool tensor_cores =
        (GetParam() == "cuda" && c.chunk >= 16) ||
        (GetParam() == "cpu" && dev.backend->info().kernels == "amx" && c.chunk >= 16 &&
         c.kv_dtype != DType::F32 && c.scores.softcap == 0.0f && c.head_dim % 32 == 0);
    // A quantized cache: RoPE's last-bit differences between backends can move a K value across
    // a rounding boundary, one quantization step (max|x| / 127 or / 8 of its group) apart (seen:
    // 9e-8 on cpu, where no value crossed).
    const double tolerance = tensor_cores ? 4e-3 : quantized ? 2e-3 : 2e-6;
    EXPECT_LE(relative_error(run(dev), run(ref)), tolerance);
  }
}

struct LongContextCase {
  int64_t head_dim;
  DType kv_dtype;
  AttentionScores scores;
  bool window_table;  // the storage is a sliding-window layers' pool (KvShape::window_table)
  int64_t n_heads;    // over 4 KV heads: GQA groups of 1 to 8 (cuda: a block per group)
};

// Decode over long contexts: one token each for two sequences at positions 1500 and 700, the case
// cuda cuts into key splits (split-K) and merges. Also the window layers' own pool: the storage
// reads BatchSequence::window_block_table, whose blocks behind the window are -1 at the decode
// step (never read), while block_table holds other blocks (reading it would give other keys).
TEST_P(BackendOps, LongContextDecodeAndWindowTablesMatchReference) {
  const LongContextCase cases[] = {{128, DType::F16, {0.088f}, false, 8},
                                   {64, DType::F32, {0.125f, 5.0f, 600}, false, 16},
                                   {80, DType::F16, {0.11f}, false, 4},
                                   {128, DType::F16, {0.088f, 0.0f, 512}, true, 32},
                                   {64, DType::F32, {0.125f, 0.0f, 100}, true, 12},
                                   {128, DType::F32, {0.088f}, false, 4}};
  const int64_t n_kv = 4, block = 16, ctx_a = 1500, ctx_b = 700;
  for (const LongContextCase& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " kv " + dtype_name(c.kv_dtype) +
                 " window " + std::to_string(c.scores.window) +
                 (c.window_table ? " window table" : "") + " heads " + std::to_string(c.n_heads));
    const int64_t hd = c.head_dim, n_heads = c.n_heads;
    KvShape shape;
    shape.n_layers = 1;
    shape.n_blocks = 256;
    shape.block_size = block;
    shape.n_kv_heads = n_kv;
    shape.head_dim = hd;
    shape.window_table = c.window_table;
    shape.set_dtype(c.kv_dtype);
    std::vector<int32_t> ids(256);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(9));
    const int64_t blocks_a = ctx_a / block + 1, blocks_b = ctx_b / block + 1;
    std::vector<int32_t> table_a(ids.begin(), ids.begin() + blocks_a);
    std::vector<int32_t> table_b(ids.begin() + blocks_a, ids.begin() + blocks_a + blocks_b);
    // The other pool's tables: the same blocks in another order.
    std::vector<int32_t> other_a(table_a.rbegin(), table_a.rend());
    std::vector<int32_t> other_b(table_b.rbegin(), table_b.rend());
    auto make_batch = [&](int64_t a_start, int64_t a_n, int64_t b_start, int64_t b_n,
                          const std::vector<int32_t>& ta, const std::vector<int32_t>& tb) {
      Batch batch;
      for (int64_t i = 0; i < a_n + b_n; ++i) batch.tokens.push_back(static_cast<int32_t>(i % 7));
      batch.sequences.push_back({ta.data(), a_start, a_n});
      batch.sequences.push_back({tb.data(), b_start, b_n});
      if (c.window_table) {
        for (BatchSequence& s : batch.sequences) {
          s.window_block_table = s.block_table;
          s.block_table = &s == &batch.sequences[0] ? other_a.data() : other_b.data();
        }
      }
      batch.finalize();
      return batch;
    };
    // At the decode step the window pool no longer holds the blocks behind each window.
    std::vector<int32_t> window_a = table_a, window_b = table_b;
    if (c.window_table) {
      for (int64_t b = 0; (b + 1) * block <= ctx_a + 1 - c.scores.window; ++b) window_a[b] = -1;
      for (int64_t b = 0; (b + 1) * block <= ctx_b + 1 - c.scores.window; ++b) window_b[b] = -1;
    }
    const Batch fill = make_batch(0, ctx_a, 0, ctx_b, table_a, table_b);
    const Batch step = make_batch(ctx_a, 1, ctx_b, 1, window_a, window_b);
    auto run = [&](Device& d) {
      std::unique_ptr<KvStorage> kv = d.backend->allocate_kv(shape);
      uint32_t seed = 300;
      std::vector<float> out_step;
      for (const Batch* b : {&fill, &step}) {
        const int64_t T = b->size();
        const auto [q, k, v, out] = put_qkv(d, T, n_heads, n_kv, hd, seed);
        d.backend->store_kv(*kv, 0, k, v, *b);
        if (b != &step) continue;  // the fill only writes the cache
        d.backend->attention(*kv, 0, q, n_heads, c.scores, *b, out);
        out_step = d.get(out, T * n_heads * hd);
      }
      return out_step;
    };
    Device dev(GetParam());
    Device ref("reference");
    EXPECT_LE(relative_error(run(dev), run(ref)), 2e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(NonReference, BackendOps, ::testing::ValuesIn([] {
                           std::vector<std::string> names = test::backends_under_test();
                           std::erase(names, "reference");
                           return names;
                         }()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ember
