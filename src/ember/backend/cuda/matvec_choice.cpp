// How the decode matvec kernels (kernels_matvec.cu) split their work: rows per warp by the launch's
// shape, and whether warps load before the wait for the kernel before; both can be forced (tests,
// benchmarks, EMBER_CUDA_MATVEC_ROWS / EMBER_CUDA_MATVEC_EARLY).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ember/backend/cuda/cuda_backend.h"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {

namespace {
// Rows per warp forced by set_matvec_rows_per_warp or EMBER_CUDA_MATVEC_ROWS (1, 2 or 4); 0: by
// shape; -1: not read yet. Early loads likewise (EMBER_CUDA_MATVEC_EARLY=0 turns them off).
std::atomic<int> forced_rows_per_warp{-1};
std::atomic<int> early_loads{-1};
}  // namespace

void set_matvec_rows_per_warp(int rows) {
  forced_rows_per_warp.store(rows == 1 || rows == 2 || rows == 4 ? rows : 0);
}

void set_matvec_early_loads(int on) {
  early_loads.store(on == 0 ? 0 : 1);
}

bool matvec_early_loads() {
  int on = early_loads.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* e = std::getenv("EMBER_CUDA_MATVEC_EARLY");
    set_matvec_early_loads(e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1);
    on = early_loads.load();
  }
  return on != 0;
}

int matvec_rows_per_warp(int64_t rows, int64_t tokens, bool quantized, int sm_count) {
  int forced = forced_rows_per_warp.load(std::memory_order_relaxed);
  if (forced < 0) {
    const char* e = std::getenv("EMBER_CUDA_MATVEC_ROWS");
    set_matvec_rows_per_warp(e != nullptr ? std::atoi(e) : 0);
    forced = forced_rows_per_warp.load();
  }
  if (forced > 0) return forced;
  // Measured on an H200 (132 multiprocessors; bench/cuda_matvec_bench.cpp for each product of an
  // 8B-shaped step, `ember bench` for whole decode steps). One token, float weights: 4 rows per
  // warp from 64 rows per multiprocessor (gate/up, the output head), 2 from 32 (Q/K/V), else 1:
  // 8B-shaped bf16 decode 150.5 -> 170.2 tok/s, where 2 rows everywhere, though faster product by
  // product alone (by 2-7% on the 4,096-row O and down), gave 156-160 against 148.6. Quantized
  // weights, whose decoding bounds them, gain more from more rows (q4_0 gate/up 3.1x with 4).
  // Several tokens: each activation read serves more rows, and 4 rows win almost everywhere (bf16
  // gate/up with 8 tokens 1.8x, q8_0/q4_0 2.5-3x, even where q4_0 with 5+ tokens spills), except
  // bf16's O and down with 2 tokens (1 row: 14.8 and 47.4 us against 16.8 and 54.0).
  const int64_t per_sm = rows / std::max(sm_count, 1);
  if (tokens == 1 && !quantized) return per_sm >= 64 ? 4 : per_sm >= 32 ? 2 : 1;
  if (tokens == 1) return per_sm >= 40 ? 4 : per_sm >= 16 ? 2 : 1;
  if (!quantized && tokens == 2) return per_sm >= 40 ? 4 : 1;
  return per_sm >= 16 ? 4 : per_sm >= 8 ? 2 : 1;
}

}  // namespace ember::cuda
