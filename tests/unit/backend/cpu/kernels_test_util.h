// Helpers shared by the Kernels* tests: seeded random data, weight matrices in any dtype, and a
// guard that runs a test body once per ISA the CPU supports and restores the dispatcher after.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/core/dtype.h"
#include "ember/core/quantize.h"
#include "test_util.h"

// Skips the test (ctest shows it as skipped) on a machine without usable AMX, naming what is
// missing.
#define EMBER_REQUIRE_AMX()                                                          \
  do {                                                                               \
    if (!::ember::cpu::amx_available()) {                                            \
      GTEST_SKIP() << "AMX unavailable: " << ::ember::cpu::amx_unavailable_reason(); \
    }                                                                                \
  } while (0)

namespace ember::test {

// Owns the bytes of a [n_rows, n_cols] matrix stored as `dtype` (converted from f32 row by row).
struct OwnedWeights {
  std::vector<uint8_t> bytes;
  cpu::WeightMatrix view;
};

// Interleaved8 (q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl only) converts in the Rows layout, then interleaves
// in place, as the loader does.
inline OwnedWeights make_weights(const std::vector<float>& values, int64_t n_rows, int64_t n_cols,
                                 DType dtype, cpu::WeightLayout layout = cpu::WeightLayout::Rows) {
  OwnedWeights w;
  const int64_t row_bytes = dtype_row_bytes(dtype, n_cols);
  w.bytes.resize(static_cast<size_t>(cpu::weight_matrix_bytes(dtype, n_rows, n_cols, layout)));
  for (int64_t r = 0; r < n_rows; ++r) {
    convert_row(values.data() + r * n_cols, dtype, w.bytes.data() + r * row_bytes, n_cols);
  }
  w.view = {dtype, w.bytes.data(), n_rows, n_cols, row_bytes};
  if (layout == cpu::WeightLayout::Interleaved8)
    w.view = cpu::interleave_rows(w.view, w.bytes.data());
  return w;
}

// The ISAs this CPU can run (Scalar always; Avx2, Avx512 and Amx when the dispatcher accepts them).
inline std::vector<cpu::Isa> supported_isas() {
  const cpu::Isa saved = cpu::active_isa();
  std::vector<cpu::Isa> isas = {cpu::Isa::Scalar};
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512, cpu::Isa::Amx}) {
    cpu::force_isa(isa);
    if (cpu::active_isa() == isa) isas.push_back(isa);
  }
  cpu::force_isa(saved);
  return isas;
}

// Whether matmuls on `dtype` under `isa` round the activations to bf16 (the AVX-512 bf16 kernels,
// vdpbf16ps, and the AMX set's): their error bound is 2^-8 * sum |x w| instead of f32 summation
// error. (The AMX set also rounds them for q8_0 / q4_0 in Interleaved8 from 16 tokens on:
// cpu::matmul_runs_on_tiles; kernels_amx_test.cpp covers those.)
inline bool rounds_activations_to_bf16(cpu::Isa isa, DType dtype) {
  return (isa == cpu::Isa::Avx512 || isa == cpu::Isa::Amx) && dtype == DType::BF16;
}

// Forces `isa` for its lifetime and restores the previous choice. Usage:
//   for (cpu::Isa isa : supported_isas()) { IsaScope scope(isa); SCOPED_TRACE(...); ... }
class IsaScope {
 public:
  explicit IsaScope(cpu::Isa isa) : saved_(cpu::active_isa()) { cpu::force_isa(isa); }
  ~IsaScope() { cpu::force_isa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  cpu::Isa saved_;
};

}  // namespace ember::test
