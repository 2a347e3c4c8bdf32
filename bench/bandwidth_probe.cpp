// Read-bandwidth probe: streams a buffer much larger than the last-level cache with AVX2 loads
// from T threads and reports GB/s (median of repetitions). Decode at batch 1 reads every weight
// once per token, so bytes-per-token / this figure is the decode ceiling.
//
//   ember_bandwidth_probe [--mb 1024] [--threads 2] [--reps 5] [--pages small|huge|both]
//
// Both page sizes by default: 4 KiB pages bound decode on weights read in place from an mmap'd
// checkpoint, 2 MiB pages the weights ember copies at load (the last line: the machine's ceiling).
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

#include "ember/core/huge_pages.h"

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

// GB/s of `reps` passes over buf[0, n) split among `threads` threads, sorted.
std::vector<double> measure(const float* buf, size_t n, int threads, int reps) {
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
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 1024;
  int threads = 2, reps = 5;
  std::string pages = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") {
      mb = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--pages") {
      pages = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (pages != "small" && pages != "huge" && pages != "both") {
    std::fprintf(stderr, "--pages takes small, huge or both\n");
    return 2;
  }
  const size_t n = mb * 1024 * 1024 / sizeof(float);
  // Ordinary 4 KiB pages (how an mmap'd checkpoint is read), then a buffer advised into 2 MiB
  // transparent huge pages (how ember holds weights it copies at load: core/huge_pages.h).
  for (const char* kind : {"small", "huge"}) {
    if (pages != "both" && pages != kind) continue;
    const bool huge = std::string(kind) == "huge";
    std::unique_ptr<ember::HugePageBuffer> huge_buf;
    std::unique_ptr<float[]> small_buf;
    float* buf = nullptr;
    if (huge) {
      huge_buf = std::make_unique<ember::HugePageBuffer>(n * sizeof(float));
      buf = reinterpret_cast<float*>(huge_buf->data());
    } else {
      // No MADV_HUGEPAGE: with THP in "madvise" mode (the usual default) these stay 4 KiB pages.
      small_buf.reset(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
      buf = small_buf.get();
    }
    for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
    const std::vector<double> gbps = measure(buf, n, threads, reps);
    const size_t backed = ember::huge_page_backed_bytes(buf, n * sizeof(float));
    std::printf(
        "read bandwidth (%s pages, %zu of %zu MB in huge pages): %.1f GB/s median (min %.1f, max "
        "%.1f) over %d reps, %d threads\n",
        huge ? "2 MiB" : "4 KiB", backed >> 20, mb, gbps[gbps.size() / 2], gbps.front(),
        gbps.back(), reps, threads);
    if (small_buf) std::free(small_buf.release());
  }
  return 0;
}
