#include "ember/backend/cpu/compute_probe.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/avx512_util.h"

#define EMBER_AMX __attribute__((target(EMBER_AVX512_TARGET ",amx-tile,amx-bf16,amx-int8")))

namespace ember::cpu {
namespace {

constexpr int64_t kIterations = 1 << 20;  // ~5-20 ms a pass on the machines we run on
constexpr int kAccumulators = 12;  // independent chains: enough to hide the latency everywhere

// Each loop returns its operation count (a multiply and an add are 2) for the caller to divide by
// the time; the accumulators go to an empty asm so the loop cannot be dropped.

EMBER_AMX double amx_loop(bool int8) {
  AmxTileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.rows[i] = 16;
    config.colsb[i] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(config));  // (see amx_matmul.cpp)
  alignas(64) static const uint8_t zeros[1024] = {};
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t n = kIterations / 16;
  if (int8) {
    for (int64_t i = 0; i < n; ++i) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
    return 4.0 * static_cast<double>(n) * 2 * 16 * 16 * 64;
  }
  for (int64_t i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  return 4.0 * static_cast<double>(n) * 2 * 16 * 16 * 32;
}

EMBER_AVX512 double avx512_bf16_loop() {
  __m512 acc[kAccumulators];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi16(0x3f80);
  const __m512bh b = reinterpret_cast<const __m512bh&>(one);
  for (int64_t i = 0; i < kIterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], b, b);
  }
  for (auto& a : acc) __asm__ volatile("" : : "v"(a));
  return kAccumulators * static_cast<double>(kIterations) * 2 * 32;
}

EMBER_AVX512 double avx512_vnni_loop() {
  __m512i acc[kAccumulators];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i b = _mm512_set1_epi8(1);
  for (int64_t i = 0; i < kIterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], b, b);
  }
  for (auto& a : acc) __asm__ volatile("" : : "v"(a));
  return kAccumulators * static_cast<double>(kIterations) * 2 * 64;
}

EMBER_AVX2 double avx2_fma_loop() {
  __m256 acc[kAccumulators];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 b = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < kIterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_fmadd_ps(acc[j], b, b);
  }
  for (auto& a : acc) __asm__ volatile("" : : "v"(a));
  return kAccumulators * static_cast<double>(kIterations) * 2 * 8;
}

EMBER_AVX512 double avx512_fma_loop() {
  __m512 acc[kAccumulators];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 b = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < kIterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_fmadd_ps(acc[j], b, b);
  }
  for (auto& a : acc) __asm__ volatile("" : : "v"(a));
  return kAccumulators * static_cast<double>(kIterations) * 2 * 16;
}

bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vnni");
}

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Operations per second of `loop` on every thread at once: best of three passes.
template <typename Loop>
double peak(ThreadPool& threads, Loop loop) {
  double best = 0;
  const int n = threads.size();
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> ops(static_cast<size_t>(n), 0.0);
    const auto start = std::chrono::steady_clock::now();
    threads.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ops[static_cast<size_t>(i)] = loop();
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / s);
  }
  return best;
}

}  // namespace

std::vector<ComputePeak> measure_compute_peaks(ThreadPool& threads) {
  std::vector<ComputePeak> peaks;
  if (has_avx512() && amx_available()) {
    peaks.push_back({"amx-bf16", peak(threads, [] { return amx_loop(false); }), false});
    peaks.push_back({"amx-int8", peak(threads, [] { return amx_loop(true); }), true});
  }
  if (has_avx512()) {
    peaks.push_back({"avx512-bf16", peak(threads, avx512_bf16_loop), false});
    peaks.push_back({"avx512-vnni", peak(threads, avx512_vnni_loop), true});
    peaks.push_back({"avx512-fma", peak(threads, avx512_fma_loop), false});
  }
  if (has_avx2()) peaks.push_back({"avx2-fma", peak(threads, avx2_fma_loop), false});
  return peaks;
}

}  // namespace ember::cpu
