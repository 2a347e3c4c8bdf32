// Conversions between float32 rows and rows of a storage dtype in the Rows layout every file format
// uses (--dtype conversion at load, --dummy weights, tests). Plain scalar code: it runs once per
// weight at load, never in the forward pass.
// Quantization follows GGUF's reference rounding: q8_0 d = max|x| / 127, q = round(x / d);
// q4_0 d = (signed value of max magnitude) / -8, q = min(15, trunc(x / d + 8.5)).
#pragma once

#include <cstdint>

#include "ember/core/dequantize.h"
#include "ember/core/dtype.h"

namespace ember {

void quantize_row_q8_0(const float* x, BlockQ8_0* out, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* out, int64_t n);
// Writes n floats as `dtype` (f32 copy, f16/bf16 round-to-nearest-even, q8_0/q4_0 blocks) into
// `out`, which must hold dtype_row_bytes(dtype, n) bytes.
void convert_row(const float* x, DType dtype, void* out, int64_t n);
// The other block types (quant_blocks.h), their scales searched for least squared error
// (quantize_blocks.h); throws ember::Error unless n is a multiple of the type's block.
void quantize_row_blocks(const float* x, DType dtype, void* out, int64_t n);

}  // namespace ember
