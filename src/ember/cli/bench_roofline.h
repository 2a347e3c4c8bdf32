// ember bench --probe, prefill side: the CPU's compute ceilings (Backend::probe_compute) and where
// a prefill's time went (Backend::op_times): matmuls and attention each as FLOP/s and as a share
// of the ceiling of the kernel family they run on, and the rest of the step. The roofline that
// `ember trace` will draw.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/backend/backend.h"

namespace ember::cli {

struct PrefillRoofline {
  std::vector<ComputePeak> peaks;
  OpTimes ops;         // summed over the timed prefills
  double seconds = 0;  // their wall time
  int64_t tokens = 0;  // their prompt tokens
  std::string family;  // the family the prefill matmuls run on (a key of peaks)

  bool measured() const { return !peaks.empty() && seconds > 0; }
  double peak_of_family() const;
};

// The kernel family prefill matmuls run on for `kernels` (BackendInfo::kernels) and the matrices'
// dtype: amx-bf16 under AMX for bf16 / q8_0 / q4_0; avx512-bf16 or avx512-fma (the faster in
// `peaks`) for bf16 and avx512-vnni for quantized matrices under AVX-512; avx2-fma otherwise.
std::string prefill_matmul_family(const std::string& kernels, DType dtype,
                                  const std::vector<ComputePeak>& peaks);

void print_roofline(const PrefillRoofline& r);
nlohmann::ordered_json roofline_json(const PrefillRoofline& r);

}  // namespace ember::cli
