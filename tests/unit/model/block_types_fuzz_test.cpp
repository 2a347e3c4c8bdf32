// The block readers under random input. (1) Rows of random bytes of every block type, NaN and Inf
// scales included, through the spec dequantizer, the AVX2 panel dequantizer and every row dot:
// never a crash or a sanitizer report (CI runs this under ASan/UBSan), the AVX2 dequantizer equal
// to the spec wherever the spec's value is a number, and finite values wherever the block's scale
// fields are finite. (2) The tensor directory of a real K-quant file with every ggml type id
// written over each tensor's type: the file loads or is refused with an ember::Error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/core/quant_blocks.h"
#include "ember/formats/gguf.h"
#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember {
namespace {

constexpr DType kBlockTypes[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1,   DType::Q8_1,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                                 DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

// Whether every scale field of the row's blocks is finite (q8_k: its f32 d; the others: each f16
// field).
bool row_scales_finite(DType dtype, const std::vector<uint8_t>& row) {
  const int64_t bb = dtype_block_bytes(dtype);
  for (size_t at = 0; at < row.size(); at += static_cast<size_t>(bb)) {
    if (dtype == DType::Q8_K) {
      float d;
      std::memcpy(&d, &row[at], 4);
      if (!(std::fabs(d) < 1e30f)) return false;  // a finite f32 d near FLT_MAX overflows d * q
      continue;
    }
    // f16 fields sit at the block's start, except q2_k (80, 82), q3_k (108), q6_k (208).
    const int first = dtype == DType::Q2_K   ? 80
                      : dtype == DType::Q3_K ? 108
                      : dtype == DType::Q6_K ? 208
                                             : 0;
    const bool two = dtype == DType::Q4_1 || dtype == DType::Q5_1 || dtype == DType::Q8_1 ||
                     dtype == DType::Q2_K || dtype == DType::Q4_K || dtype == DType::Q5_K;
    for (int f = 0; f < (two ? 2 : 1); ++f) {
      uint16_t h;
      std::memcpy(&h, &row[at + first + 2 * f], 2);
      if (!std::isfinite(f16_to_f32(h))) return false;
    }
  }
  return true;
}

TEST(BlockTypesFuzz, RandomRowsNeverCrashAndDequantizersAgree) {
  constexpr int64_t K = 512;
  std::mt19937 rng(77);
  std::vector<float> spec(K), fast(K);
  std::vector<cpu::BlockQ8Act> x(K / kQuantBlock);
  const auto xf = [&] {
    std::vector<float> v(K);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (float& f : v) f = dist(rng);
    return v;
  }();
  reference::quantize_activations(xf.data(), 1, K, x.data());
  for (DType dtype : kBlockTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(dtype, K)));
    for (int iter = 0; iter < 300; ++iter) {
      for (auto& b : row) b = static_cast<uint8_t>(rng());
      dequantize_row(dtype, row.data(), spec.data(), K);
      if (row_scales_finite(dtype, row)) {
        for (float v : spec) ASSERT_TRUE(std::isfinite(v)) << "iteration " << iter;
      }
      (void)cpu::scalar::quant_row_dot_exact(dtype, row.data(), x.data(), K);
      if (!cpu_has_avx2()) continue;
      cpu::avx2::dequantize_rows(dtype, row.data(), 0, 1, K, fast.data(), K);
      for (int64_t i = 0; i < K; ++i) {
        if (std::isnan(spec[i])) continue;  // NaN payloads may differ
        ASSERT_EQ(std::memcmp(&spec[i], &fast[i], 4), 0) << "iteration " << iter << " value " << i;
      }
      if (const cpu::QuantRowDot dot = cpu::avx2::quant_row_dot(dtype)) {
        (void)dot(row.data(), x.data(), K);
      }
    }
  }
}

// Offsets of each tensor's u32 type field in the directory of a GGUF file's bytes: after the name
// (u64 length + bytes), n_dims (u32) and n_dims u64 dims.
std::vector<size_t> type_field_offsets(const std::vector<uint8_t>& bytes, const GgufFile& f) {
  std::vector<size_t> out;
  for (const GgufTensorInfo& info : f.tensors()) {
    const std::string& name = info.name;
    std::vector<uint8_t> key(8 + name.size());
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    std::memcpy(key.data() + 8, name.data(), name.size());
    const auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
    if (it == bytes.end()) continue;
    const size_t at = static_cast<size_t>(it - bytes.begin()) + key.size();
    uint32_t n_dims;
    std::memcpy(&n_dims, &bytes[at], 4);
    out.push_back(at + 4 + 8 * n_dims);
  }
  return out;
}

TEST(BlockTypesFuzz, EveryTypeIdInTheDirectoryLoadsOrIsRefused) {
  const auto src = test::fixture("models/quant-zoo/zoo-q4_k_m.gguf");
  EMBER_REQUIRE_FIXTURE(src);
  std::vector<uint8_t> good(std::filesystem::file_size(src));
  std::ifstream(src, std::ios::binary).read(reinterpret_cast<char*>(good.data()), good.size());
  const std::vector<size_t> fields = type_field_offsets(good, GgufFile(src.string()));
  ASSERT_GE(fields.size(), 10u);
  const std::string path = (test::scratch_dir("block-types-fuzz") / "t.gguf").string();
  std::mt19937 rng(5);
  int loaded = 0, refused = 0;
  for (uint32_t type = 0; type < 40; ++type) {
    std::vector<uint8_t> b = good;
    const size_t field = fields[rng() % fields.size()];
    std::memcpy(&b[field], &type, 4);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    try {
      LoadOptions o;
      o.path = path;
      o.load_tokenizer = false;
      load_model(o);
      ++loaded;
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);  // a same-size type (or the original one) still loads
}

}  // namespace
}  // namespace ember
