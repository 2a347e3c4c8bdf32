// AVX2 row dots and panel dequantizers of the iq4_nl, iq4_xs weights (quant_row_dot.h).
#include "ember/backend/cpu/quant_row_dot.h"

namespace ember::cpu::avx2 {

QuantRowDot iquant_row_dot(DType /*dtype*/) {
  return nullptr;
}

bool iquant_dequantize_rows(DType /*dtype*/, const uint8_t* /*base*/, int64_t /*row_bytes*/,
                            int64_t /*rows*/, int64_t /*K*/, float* /*out*/, int64_t /*ldo*/) {
  return false;
}

}  // namespace ember::cpu::avx2
