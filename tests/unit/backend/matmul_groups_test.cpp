// Backend::matmul_groups (a mixture layer's active experts in one call) against one matmul() per
// group on the same backend: the same bits, for every weight type the experts come in, groups of
// 1 to 5 tokens, groups sharing one input (batch 1: every expert reads the one token) and groups
// whose inputs differ in width (the down projections). On cpu with 2 threads the grouped call
// runs every group in one parallel region (the rows of all groups split over the threads), so a
// wrong row offset, a missed piece or an input quantized for the wrong group shows here.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/core/quantize.h"
#include "test_util.h"

namespace ember {
namespace {

using test::random_floats;

// A [rows, cols] matrix of `dtype` in the backend's memory (from random rows).
WeightMatrix upload(Backend& backend, DType dtype, int64_t rows, int64_t cols, uint32_t seed,
                    std::vector<std::vector<uint8_t>>& keep) {
  const std::vector<float> src = random_floats(rows * cols, seed);
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  keep.emplace_back(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = keep.back().data() + r * row_bytes;
    if (dtype_is_quantized(dtype) && dtype != DType::Q8_0 && dtype != DType::Q4_0) {
      quantize_row_blocks(src.data() + r * cols, dtype, out, cols);
    } else {
      convert_row(src.data() + r * cols, dtype, out, cols);
    }
  }
  return backend.upload_matrix({dtype, keep.back().data(), rows, cols, row_bytes},
                               /*host_is_file=*/false);
}

class MatmulGroups : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { EMBER_REQUIRE_BACKEND(GetParam()); }
};

TEST_P(MatmulGroups, GiveTheBitsOfOneMatmulPerGroup) {
  BackendOptions options;
  options.name = GetParam();
  options.n_threads = 2;
  const std::shared_ptr<Backend> backend = make_backend(options);
  // Experts of d_model D and width F: gate and up [F, D] on the token's row, down [D, F].
  const int64_t D = 512, F = 256;
  const int64_t tokens_per_group[] = {1, 3, 1, 5, 2, 1};
  const int n_groups = 6;
  for (DType dtype :
       {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<std::vector<uint8_t>> keep;
    std::vector<WeightMatrix> gate, up, down;
    for (int g = 0; g < n_groups; ++g) {
      gate.push_back(upload(*backend, dtype, F, D, 100 + 3 * g, keep));
      up.push_back(upload(*backend, dtype, F, D, 101 + 3 * g, keep));
      down.push_back(upload(*backend, dtype, D, F, 102 + 3 * g, keep));
    }
    int64_t rows = 0;
    for (int64_t n : tokens_per_group) rows += n;
    Activations x, one_token, h, gate_out, up_out, down_out, expected;
    backend->reserve(x, rows * D);
    backend->reserve(one_token, D);
    backend->reserve(h, rows * F);
    backend->reserve(gate_out, 2 * rows * F);
    backend->reserve(up_out, 2 * rows * F);
    backend->reserve(down_out, rows * D);
    backend->reserve(expected, 2 * rows * F);
    backend->from_host(x.data(), random_floats(rows * D, 7).data(), rows * D);
    backend->from_host(one_token.data(), random_floats(D, 8).data(), D);
    backend->from_host(h.data(), random_floats(rows * F, 9).data(), rows * F);
    std::vector<float> staging, want;
    const auto host = [&](const float* p, int64_t n) {
      const std::span<const float> s = backend->to_host(p, n, staging);
      return std::vector<float>(s.begin(), s.end());
    };
    // gate/up on each group's own tokens; then on one shared token (batch 1), every group.
    for (const bool shared : {false, true}) {
      SCOPED_TRACE(shared ? "one token shared by every group" : "each group its own tokens");
      std::vector<MatmulGroup> groups;
      int64_t at = 0;
      for (int g = 0; g < n_groups; ++g) {
        const int64_t n = shared ? 1 : tokens_per_group[g];
        const float* in = shared ? one_token.data() : x.data() + at * D;
        groups.push_back(MatmulGroup{
            in, n, 2, {&gate[g], &up[g]}, {gate_out.data() + at * F, up_out.data() + at * F}});
        at += n;
      }
      backend->matmul_groups(groups);
      const std::vector<float> got_gate = host(gate_out.data(), at * F);
      const std::vector<float> got_up = host(up_out.data(), at * F);
      for (const MatmulGroup& g : groups) {
        const int64_t offset = g.ys[0] - gate_out.data();
        backend->matmul(g.x, g.rows, {g.ws[0], g.ws[1]},
                        {expected.data() + offset, expected.data() + rows * F + offset});
      }
      want = host(expected.data(), at * F);
      EXPECT_EQ(0, std::memcmp(got_gate.data(), want.data(), want.size() * sizeof(float)));
      want = host(expected.data() + rows * F, at * F);
      EXPECT_EQ(0, std::memcmp(got_up.data(), want.data(), want.size() * sizeof(float)));
    }
    // The down projections: inputs F wide, one matrix per group.
    std::vector<MatmulGroup> groups;
    int64_t at = 0;
    for (int g = 0; g < n_groups; ++g) {
      groups.push_back(MatmulGroup{
          h.data() + at * F, tokens_per_group[g], 1, {&down[g]}, {down_out.data() + at * D}});
      at += tokens_per_group[g];
    }
    backend->matmul_groups(groups);
    const std::vector<float> got = host(down_out.data(), rows * D);
    for (const MatmulGroup& g : groups) {
      backend->matmul(g.x, g.rows, {g.ws[0]}, {expected.data() + (g.ys[0] - down_out.data())});
    }
    want = host(expected.data(), rows * D);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    // Not all zero (every output written).
    int64_t nonzero = 0;
    for (float v : got) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, rows * D);
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, MatmulGroups,
                         ::testing::ValuesIn(test::backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ember
