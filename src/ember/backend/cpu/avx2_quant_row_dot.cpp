// The AVX2 row dot and panel dequantizer of each block type beyond q8_0/q4_0 (quant_row_dot.h),
// from the per-family files. Types a family does not (yet) take fall back to the scalar code.
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/dequantize.h"

namespace ember::cpu::avx2 {

QuantRowDot quant_row_dot(DType dtype) {
  if (QuantRowDot dot = legacy_quant_row_dot(dtype)) return dot;
  if (QuantRowDot dot = kquant_row_dot(dtype)) return dot;
  return iquant_row_dot(dtype);
}

QuantRowDot4 quant_row_dot4(DType dtype) {
  return kquant_row_dot4(dtype);
}

void dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                     float* out, int64_t ldo) {
  if (legacy_dequantize_rows(dtype, base, row_bytes, rows, K, out, ldo)) return;
  if (kquant_dequantize_rows(dtype, base, row_bytes, rows, K, out, ldo)) return;
  if (iquant_dequantize_rows(dtype, base, row_bytes, rows, K, out, ldo)) return;
  for (int64_t i = 0; i < rows; ++i) dequantize_row(dtype, base + i * row_bytes, out + i * ldo, K);
}

}  // namespace ember::cpu::avx2
