// Read-bandwidth probe: streams a buffer much larger than the last-level cache with AVX2 loads
// from T threads and reports GB/s (median of repetitions). Decode at batch 1 reads every weight
// once per token, so bytes-per-token / this figure is the decode ceiling.
//
//   ember_bandwidth_probe [--mb 1024] [--threads 2] [--reps 5]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

__attribute__((target("avx2"))) double sum_range(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 1024;
  int threads = 2, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb")
      mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
  }
  const size_t n = mb * 1024 * 1024 / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  std::vector<double> gbps;
  volatile double sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::thread> pool;
    std::vector<double> partial(static_cast<size_t>(threads));
    auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        size_t begin = n / threads * t, end = t + 1 == threads ? n : n / threads * (t + 1);
        begin &= ~size_t{31};
        partial[t] = sum_range(buf + begin, end - begin);
      });
    }
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (double p : partial) sink = sink + p;
    gbps.push_back(static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  std::printf(
      "read bandwidth: %.1f GB/s median (min %.1f, max %.1f) over %d reps, %zu MB, %d threads\n",
      gbps[gbps.size() / 2], gbps.front(), gbps.back(), reps, mb, threads);
  std::free(buf);
  return 0;
}
