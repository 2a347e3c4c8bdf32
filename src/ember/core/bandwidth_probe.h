// Read-bandwidth probe: streams a buffer much larger than the last-level cache from T threads and
// reports GB/s. Decode at batch 1 reads every weight once per token, so bytes per token divided by
// this figure is the decode ceiling. Used by `ember bench --probe` (measured next to each decode
// repetition) and by bench/ember_bandwidth_probe.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/huge_pages.h"

namespace ember {

class BandwidthProbe {
 public:
  // A buffer of `bytes` (rounded down to whole 128-byte lines), written once so that every page is
  // mapped: in 2 MiB transparent huge pages (huge_pages.h) or in ordinary 4 KiB pages, the two
  // ways ember's weights can sit in memory (copied at load / read in place from the file).
  BandwidthProbe(std::size_t bytes, bool huge_pages);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  // One pass over the whole buffer, split into contiguous parts over `threads` threads: GB/s.
  double measure(int threads) const;

  bool huge_pages() const { return huge_.data() != nullptr; }
  std::size_t bytes() const { return bytes_; }
  const void* data() const { return data_; }

 private:
  HugePageBuffer huge_;
  void* small_ = nullptr;
  const float* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace ember
