// How host-memory KV caches store one row: the head_dim values of one token's K (or V) for one kv
// head. The cpu and reference backends share it (cpu/host_kv_storage.h lays the rows out); the
// quantized forms are written once, when a token's K/V enter the cache, and read back inside the
// attention kernels a block at a time (never as a dequantized copy of the cache).
//   f32, f16, bf16  head_dim values as they are (f16/bf16 round to nearest even);
//   q8_0            groups of g values: f16 scale d + g int8 q, value = d * q;
//   q4_0            groups of g values: f16 scale d + g/2 bytes, byte j holding value j in its low
//                   nibble and value j + g/2 in its high one, value = d * (nibble - 8).
// g = 32 (GGUF's q8_0/q4_0 blocks, byte for byte) when head_dim allows, else 16 or 8 (tiny models:
// stories260K's head_dim is 8): kv_quant_group(). Rounding is GGUF's reference rounding
// (core/quantize.h): q8_0 d = max|x| / 127, q4_0 d = (signed value of max magnitude) / -8.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/dtype.h"

namespace ember {

// The dtypes a KV cache may be stored in: f32, f16, bf16, q8_0, q4_0.
bool kv_dtype_supported(DType dtype);
// Values per quantization group of a q8_0/q4_0 row of head_dim values: the largest of 32, 16, 8
// dividing head_dim; 0 when none does (such a head_dim cannot be stored quantized).
int64_t kv_quant_group(int64_t head_dim);
// Why `dtype` cannot hold rows of head_dim values ("" when it can): a dtype outside
// kv_dtype_supported(), or a quantized one for a head_dim that is not a multiple of 8.
std::string kv_dtype_problem(DType dtype, int64_t head_dim);
// Bytes of one row; requires kv_dtype_problem(dtype, head_dim) to be empty.
int64_t kv_row_bytes(DType dtype, int64_t head_dim);
// Bytes one value costs on average (scales included): kv_row_bytes / head_dim.
double kv_bytes_per_value(DType dtype, int64_t head_dim);

// x [head_dim] into the row at `out` (kv_row_bytes(dtype, head_dim) bytes).
void kv_write_row(const float* x, int64_t head_dim, DType dtype, void* out);
// The row at `row` back to f32: out [head_dim]. Exact: every stored value widens without rounding.
void kv_read_row(const void* row, int64_t head_dim, DType dtype, float* out);

// --kv-rotate: x [head_dim] multiplied in place by the normalized Walsh-Hadamard matrix H of each
// quantization group (kv_quant_group values; block-diagonal, orthonormal and its own inverse). A
// cache that stores H k instead of k keeps every score, as (H q) . (H k) = q . k, while the
// rotation spreads a few large channels (K's outliers) over the whole group, so one group scale
// fits all its values better. Requires kv_quant_group(head_dim) > 0.
void kv_rotate(float* x, int64_t head_dim);

}  // namespace ember
