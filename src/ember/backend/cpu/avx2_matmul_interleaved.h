// AVX2 q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs matmul against 8-bit activations for
// matrices in the Interleaved8 layout (weight_layout.h); matmul_q8 (avx2_matmul_q8.cpp) hands those
// matrices here.
#pragma once

#include <cstdint>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu::avx2 {

// matmul_q8 for w.layout == Interleaved8: y[t * ldy + n] for n in [row_begin, row_end).
void matmul_q8_interleaved(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                           int64_t ldy, int64_t row_begin, int64_t row_end);

}  // namespace ember::cpu::avx2
