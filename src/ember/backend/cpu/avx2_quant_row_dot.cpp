// The AVX2 row dot of each block type beyond q8_0/q4_0 (quant_row_dot.h), from the per-family
// files. Types without one fall back to the scalar row dot.
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/dequantize.h"

namespace ember::cpu::avx2 {

QuantRowDot quant_row_dot(DType dtype) {
  switch (dtype) {
    default:
      return nullptr;
  }
}

void dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                     float* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i) dequantize_row(dtype, base + i * row_bytes, out + i * ldo, K);
}

}  // namespace ember::cpu::avx2
