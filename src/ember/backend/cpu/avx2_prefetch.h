// Software prefetch for the decode GEMVs. A GEMV tile reads R weight rows side by side, i.e. R
// short streams (a SmolLM2 bf16 row is 1152 bytes); the hardware prefetcher does not run far
// enough ahead of such streams, so a single core reached only ~60% of the bandwidth it gets on one
// long stream. While a tile computes, LinePrefetcher pulls bytes [begin, end) a few KiB ahead into
// cache, spread evenly over the tile's `steps` loop iterations so the requests never queue up.
// Measured on the SmolLM2 lm_head shape (2 threads, bf16): 11.5 -> 15.5 GB/s.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "ember/backend/cpu/avx2_util.h"

namespace ember::cpu::avx2 {

class LinePrefetcher {
 public:
  static constexpr int64_t kLine = 64;
  // Far enough ahead to cover the memory latency even for small tiles (a q4_0 tile of 4 SmolLM2
  // rows is 1.3 KiB and computes in ~150 ns); 4-8 KiB measured best, single thread.
  static constexpr int64_t kMinDistance = 4096;

  // to_l2: prefetch into L2 only. Right for float rows, whose tiles are large (an 8-row f32 tile of
  // SmolLM2 is 18 KiB: the next one in L1 too would evict the current one; f32 decode +8%);
  // wrong for q8_0/q4_0 tiles of ~1-2 KiB, whose compute-bound loop then waits on L2 (-10%).
  EMBER_AVX2_INLINE LinePrefetcher(const uint8_t* begin, const uint8_t* end, int64_t steps,
                                   bool to_l2 = false)
      : next_(reinterpret_cast<const char*>(begin)),
        end_(reinterpret_cast<const char*>(end)),
        to_l2_(to_l2) {
    const int64_t lines = end > begin ? (end - begin + kLine - 1) / kLine : 0;
    lines_per_step_ = steps > 0 ? (lines + steps - 1) / steps : lines;
  }

  // Prefetcher for a tile of `tile_bytes` at `tile` whose loop has `steps` iterations: covers the
  // same number of bytes `distance` ahead (at least one tile), never past `limit`.
  static EMBER_AVX2_INLINE LinePrefetcher ahead(const uint8_t* tile, int64_t tile_bytes,
                                                const uint8_t* limit, int64_t steps,
                                                bool to_l2 = false) {
    // In bytes from tile, clamped to limit before any pointer is formed (none past the matrix).
    const int64_t room = limit - tile;
    int64_t distance = tile_bytes > kMinDistance ? tile_bytes : kMinDistance;
    distance = distance < room ? distance : room;
    const int64_t stop = distance + tile_bytes < room ? distance + tile_bytes : room;
    return LinePrefetcher(tile + distance, tile + stop, steps, to_l2);
  }

  // Issues the next lines_per_step_ prefetches. One branch per call; the last call may run up to
  // lines_per_step_ - 1 lines past end_, which is harmless (a prefetch never faults).
  EMBER_AVX2_INLINE void step() {
    if (next_ >= end_) return;
    if (to_l2_) {
      for (int64_t i = 0; i < lines_per_step_; ++i) _mm_prefetch(next_ + i * kLine, _MM_HINT_T1);
    } else {
      for (int64_t i = 0; i < lines_per_step_; ++i) _mm_prefetch(next_ + i * kLine, _MM_HINT_T0);
    }
    next_ += lines_per_step_ * kLine;
  }

 private:
  const char* next_;
  const char* end_;
  int64_t lines_per_step_ = 0;
  bool to_l2_ = false;
};

}  // namespace ember::cpu::avx2
