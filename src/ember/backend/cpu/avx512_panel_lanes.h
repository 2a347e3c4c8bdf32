// The tokens-in-lanes float GEMM on 512-bit vectors (avx512_panel_lanes.cpp), which
// avx2::panel_lanes hands its work to under the AVX-512 and AMX kernel sets where
// float_gemm_uses_zmm() (Intel CPUs: two zmm FMAs a cycle). Same arguments, same bits.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/avx2_prefetch.h"

namespace ember::cpu::avx512 {

bool float_gemm_uses_zmm();
void panel_lanes(const float* xg, int64_t T, int64_t K, const float* w, int64_t ldw, int64_t rows,
                 float* y, int64_t ldy, const uint8_t* prefetch_limit,
                 avx2::LinePrefetcher* next_panel);

}  // namespace ember::cpu::avx512
