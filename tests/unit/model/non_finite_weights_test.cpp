// NaN or Inf in a checkpoint is named at load (it used to show only as "#####..." output): norms
// and biases are checked in full, matrices on a sample of rows. stories260K with one NaN patched
// into a norm and one Inf into a matrix row.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "ember/formats/gguf.h"
#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

TEST(NonFiniteWeights, NamedAtLoad) {
  const auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  EXPECT_TRUE(load_model(o).weights.non_finite_tensors.empty());

  uint64_t norm_at = 0, matrix_at = 0, matrix_row_bytes = 0;
  {
    const GgufFile gguf(path.string());
    const GgufTensorInfo* norm = gguf.find_tensor("blk.1.attn_norm.weight");
    const GgufTensorInfo* matrix = gguf.find_tensor("blk.2.ffn_up.weight");
    ASSERT_NE(norm, nullptr);
    ASSERT_NE(matrix, nullptr);
    ASSERT_EQ(norm->dtype, DType::F32);
    ASSERT_EQ(matrix->dtype, DType::F32);
    norm_at = norm->offset + 5 * sizeof(float);
    matrix_row_bytes = static_cast<uint64_t>(matrix->shape[1]) * sizeof(float);
    // The last row: the sample always includes the first and the last.
    matrix_at = matrix->offset + (static_cast<uint64_t>(matrix->shape[0]) - 1) * matrix_row_bytes;
  }
  test::Bytes bytes = test::read_bytes(path);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + norm_at, &nan, sizeof(float));
  std::memcpy(bytes.data() + matrix_at + 3 * sizeof(float), &inf, sizeof(float));
  const auto broken = test::scratch_dir("non-finite") / "stories-broken.gguf";
  test::write_bytes(broken, bytes);
  o.path = broken.string();
  const LoadedModel m = load_model(o);
  EXPECT_EQ(m.weights.non_finite_tensors,
            (std::vector<std::string>{"blk.1.attn_norm.weight", "blk.2.ffn_up.weight"}));
}

// A NaN in a row the sample skips: found by --check-weights (LoadOptions::check_weights) only.
TEST(NonFiniteWeights, CheckWeightsScansEveryRow) {
  const auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  uint64_t at = 0;
  {
    const GgufFile gguf(path.string());
    const GgufTensorInfo* gate = gguf.find_tensor("blk.0.ffn_gate.weight");
    ASSERT_NE(gate, nullptr);
    ASSERT_EQ(gate->dtype, DType::F32);
    ASSERT_GT(gate->shape[0], 100);  // rows 0 and n-1 are sampled, row 1 is not
    at = gate->offset + static_cast<uint64_t>(gate->shape[1]) * sizeof(float);  // row 1
  }
  test::Bytes bytes = test::read_bytes(path);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + at, &nan, sizeof(float));
  const auto broken = test::scratch_dir("non-finite-row") / "stories-row1.gguf";
  test::write_bytes(broken, bytes);
  LoadOptions o;
  o.path = broken.string();
  o.load_tokenizer = false;
  EXPECT_TRUE(load_model(o).weights.non_finite_tensors.empty());
  o.check_weights = true;
  EXPECT_EQ(load_model(o).weights.non_finite_tensors,
            (std::vector<std::string>{"blk.0.ffn_gate.weight"}));
}

}  // namespace
}  // namespace ember
