// Rows of any storage dtype as float32: the exact value of every element as its format defines it
// (quant_blocks.h). Plain scalar code for loading, conversion and references; the backends have
// their own fast versions, tested against this one.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"

namespace ember {

// n values of a `dtype` row (dtype_row_bytes(dtype, n) bytes at `row`) as float32.
void dequantize_row(DType dtype, const void* row, float* out, int64_t n);

}  // namespace ember
