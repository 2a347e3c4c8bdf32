// AVX2 row dots and panel dequantizers of the q2_k, q3_k, q4_k, q5_k, q6_k weights
// (quant_row_dot.h).
#include "ember/backend/cpu/quant_row_dot.h"

namespace ember::cpu::avx2 {

QuantRowDot kquant_row_dot(DType /*dtype*/) {
  return nullptr;
}

bool kquant_dequantize_rows(DType /*dtype*/, const uint8_t* /*base*/, int64_t /*row_bytes*/,
                            int64_t /*rows*/, int64_t /*K*/, float* /*out*/, int64_t /*ldo*/) {
  return false;
}

}  // namespace ember::cpu::avx2
