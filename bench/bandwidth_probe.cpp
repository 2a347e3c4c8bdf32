// Read-bandwidth probe (core/bandwidth_probe.h): streams a buffer much larger than the last-level
// cache from T threads and reports GB/s (median of repetitions). Decode at batch 1 reads every
// weight once per token, so bytes-per-token / this figure is the decode ceiling.
//
//   ember_bandwidth_probe [--mb 1024] [--threads 2] [--reps 5] [--pages small|huge|both]
//
// Both page sizes by default: 4 KiB pages bound decode on weights read in place from an mmap'd
// checkpoint, 2 MiB pages the weights ember copies at load (the last line: the machine's ceiling).
// `ember bench --probe` runs the same measurement next to each decode repetition.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ember/core/bandwidth_probe.h"
#include "ember/core/huge_pages.h"

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
  if (mb == 0 || threads < 1 || reps < 1) {
    std::fprintf(stderr, "--mb, --threads and --reps must be >= 1\n");
    return 2;
  }
  for (const char* kind : {"small", "huge"}) {
    if (pages != "both" && pages != kind) continue;
    const ember::BandwidthProbe probe(mb << 20, std::string(kind) == "huge");
    std::vector<double> gbps;
    for (int r = 0; r < reps; ++r) gbps.push_back(probe.measure(threads));
    std::sort(gbps.begin(), gbps.end());
    const size_t backed = ember::huge_page_backed_bytes(probe.data(), probe.bytes());
    std::printf(
        "read bandwidth (%s pages, %zu of %zu MB in huge pages): %.1f GB/s median (min %.1f, max "
        "%.1f) over %d reps, %d threads\n",
        probe.huge_pages() ? "2 MiB" : "4 KiB", backed >> 20, mb, gbps[gbps.size() / 2],
        gbps.front(), gbps.back(), reps, threads);
  }
  return 0;
}
