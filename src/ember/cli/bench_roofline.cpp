#include "ember/cli/bench_roofline.h"

#include <cstdio>

namespace ember::cli {

double PrefillRoofline::peak_of_family() const {
  for (const ComputePeak& p : peaks) {
    if (p.family == family) return p.ops_per_second;
  }
  return 0;
}

std::string prefill_matmul_family(const std::string& kernels, DType dtype,
                                  const std::vector<ComputePeak>& peaks) {
  const bool quantized = dtype_is_quantized(dtype);
  if (kernels == "amx" && (dtype == DType::BF16 || dtype == DType::Q8_0 || dtype == DType::Q4_0)) {
    return "amx-bf16";
  }
  if (kernels == "amx" || kernels == "avx512") {
    if (dtype == DType::BF16) {
      // bf16 prefill runs vdpbf16ps, or f32 FMAs where those are faster (Intel, whose vdpbf16ps
      // does half the flops a cycle of its FMAs): the faster of the two peaks is the one it runs on.
      double dot = 0, fma = 0;
      for (const ComputePeak& p : peaks) {
        if (p.family == "avx512-bf16") dot = p.ops_per_second;
        if (p.family == "avx512-fma") fma = p.ops_per_second;
      }
      return fma > dot ? "avx512-fma" : "avx512-bf16";
    }
    if (quantized) return "avx512-vnni";
  }
  return "avx2-fma";
}

void print_roofline(const PrefillRoofline& r) {
  std::printf("compute probe (all threads, register-only loops):");
  for (const ComputePeak& p : r.peaks) {
    std::printf(" %s %.0f %s/s;", p.family.c_str(), p.ops_per_second / 1e9,
                p.integer ? "GOP" : "GFLOP");
  }
  std::printf("\n");
  if (!r.measured()) return;
  const OpTimes& o = r.ops;
  const double peak = r.peak_of_family();
  const double total_flops = o.matmul_flops + o.attention_flops;
  const double other = r.seconds - o.matmul_seconds - o.attention_seconds;
  auto share = [&](double flops, double s) {
    return peak > 0 && s > 0 ? 100 * flops / s / peak : 0;
  };
  std::printf(
      "prefill (%lld tokens): %.0f GFLOP/s end to end, %.0f%% of the %s peak; matmuls %.0f%% of "
      "the time at %.0f GFLOP/s (%.0f%% of peak), attention %.0f%% at %.0f GFLOP/s (%.0f%%), "
      "everything else %.0f%%\n",
      static_cast<long long>(r.tokens), total_flops / r.seconds / 1e9,
      share(total_flops, r.seconds), r.family.c_str(), 100 * o.matmul_seconds / r.seconds,
      o.matmul_seconds > 0 ? o.matmul_flops / o.matmul_seconds / 1e9 : 0,
      share(o.matmul_flops, o.matmul_seconds), 100 * o.attention_seconds / r.seconds,
      o.attention_seconds > 0 ? o.attention_flops / o.attention_seconds / 1e9 : 0,
      share(o.attention_flops, o.attention_seconds), 100 * other / r.seconds);
}

nlohmann::ordered_json roofline_json(const PrefillRoofline& r) {
  nlohmann::ordered_json j;
  for (const ComputePeak& p : r.peaks) {
    j["peaks"][p.family] = {{"ops_per_second", p.ops_per_second}, {"integer", p.integer}};
  }
  if (!r.measured()) return j;
  j["prefill"] = {{"tokens", r.tokens},
                  {"seconds", r.seconds},
                  {"family", r.family},
                  {"family_peak", r.peak_of_family()},
                  {"matmul_seconds", r.ops.matmul_seconds},
                  {"matmul_flops", r.ops.matmul_flops},
                  {"attention_seconds", r.ops.attention_seconds},
                  {"attention_flops", r.ops.attention_flops}};
  return j;
}

}  // namespace ember::cli
