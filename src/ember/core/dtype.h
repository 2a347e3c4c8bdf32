// Storage dtypes of weights. Quantized types use GGUF's block layouts byte for byte, so GGUF
// tensors are used zero-copy:
//   q8_0: blocks of 32 values = f16 scale d + 32 x int8 q;            value = d * q
//   q4_0: blocks of 32 values = f16 scale d + 16 bytes of nibbles;    value = d * (nibble - 8)
//         byte j holds value j in its low nibble and value j+16 in its high nibble.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0 };

inline constexpr int kQuantBlock = 32;

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

const char* dtype_name(DType dtype);
// Accepts "f32", "f16", "bf16", "q8_0", "q4_0" (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);
// Elements per block (1 for float types, 32 for quantized).
int64_t dtype_block_elems(DType dtype);
// Bytes per block.
int64_t dtype_block_bytes(DType dtype);
// Bytes of a row of `n` elements; throws ember::Error if n is not a multiple of the block size.
int64_t dtype_row_bytes(DType dtype, int64_t n);
bool dtype_is_quantized(DType dtype);

}  // namespace ember
