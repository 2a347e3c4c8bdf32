#include "ember/core/bandwidth_probe.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember {

namespace {

constexpr std::size_t kLineFloats = 32;  // 128 bytes: one iteration of the AVX2 loop

#if defined(__x86_64__)
// Four independent accumulators so the loop is bound by loads, not by add latency. kPrefetch:
// also ask for the lines 4 KiB ahead into L2, as the decode kernels do on Intel CPUs, whose
// hardware prefetchers alone read well below the memory's bandwidth (decode_stream_prefetch in
// backend/cpu/avx512_util.h).
template <bool kPrefetch>
__attribute__((target("avx2"))) float sum_avx2(const float* p, std::size_t n) {
  constexpr std::size_t kAheadFloats = 4096 / sizeof(float);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + kLineFloats <= n; i += kLineFloats) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAheadFloats), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAheadFloats + 16), _MM_HINT_T1);
    }
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
#endif

// Portable fallback: integer adds of the bit patterns, which compilers vectorise without
// reassociating float math.
float sum_portable(const float* p, std::size_t n) {
  const auto* words = reinterpret_cast<const uint32_t*>(p);
  uint32_t a[8] = {};
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) a[j] += words[i + static_cast<std::size_t>(j)];
  }
  uint32_t s = 0;
  for (uint32_t v : a) s += v;
  return static_cast<float>(s);
}

float sum_range(const float* p, std::size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool intel = __builtin_cpu_is("intel") != 0;
  if (avx2) return intel ? sum_avx2<true>(p, n) : sum_avx2<false>(p, n);
#endif
  return sum_portable(p, n);
}

}  // namespace

BandwidthProbe::BandwidthProbe(std::size_t bytes, bool huge_pages) {
  const std::size_t n = bytes / sizeof(float) / kLineFloats * kLineFloats;
  bytes_ = n * sizeof(float);
  float* buf = nullptr;
  if (huge_pages) {
    huge_ = HugePageBuffer(bytes_);
    buf = reinterpret_cast<float*>(huge_.data());
  } else {
    // Not advised: with THP in its usual "madvise" mode these stay 4 KiB pages.
    small_ = std::aligned_alloc(64, bytes_);
    if (small_ == nullptr) throw std::bad_alloc();
    buf = static_cast<float*>(small_);
  }
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  data_ = buf;
}

BandwidthProbe::~BandwidthProbe() {
  std::free(small_);
}

double BandwidthProbe::measure(int threads) const {
  threads = threads > 0 ? threads : 1;
  const std::size_t n = bytes_ / sizeof(float);
  std::vector<float> partial(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto tt = static_cast<std::size_t>(t), nt = static_cast<std::size_t>(threads);
      const std::size_t begin = n / nt * tt / kLineFloats * kLineFloats;
      const std::size_t end = tt + 1 == nt ? n : n / nt * (tt + 1) / kLineFloats * kLineFloats;
      partial[tt] = sum_range(data_ + begin, end - begin);
    });
  }
  for (auto& th : pool) th.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float sink = 0;  // keep the sums alive
  for (float p : partial) sink = sink + p;
  return static_cast<double>(bytes_) / seconds / 1e9;
}

}  // namespace ember
