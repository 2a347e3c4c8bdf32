// Storage dtypes of weights. Quantized types use GGUF's block layouts byte for byte, so GGUF
// tensors are used zero-copy:
//   q8_0: blocks of 32 values = f16 scale d + 32 x int8 q;            value = d * q
//   q4_0: blocks of 32 values = f16 scale d + 16 bytes of nibbles;    value = d * (nibble - 8)
//         byte j holds value j in its low nibble and value j+16 in its high nibble.
// The other GGML block types (legacy q4_1/q5_0/q5_1/q8_1, the K-quants q2_k..q6_k/q8_k on
// super-blocks of 256 values, and the non-linear iq4_nl/iq4_xs) are laid out in quant_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  // GGML's other weight types (quant_blocks.h). Appended: the values above keep their numbers.
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  Q8_K,
  IQ4_NL,
  IQ4_XS,
};
// Every DType, in enum order.
inline constexpr DType kAllDTypes[] = {
    DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,  DType::Q4_1,
    DType::Q5_0, DType::Q5_1, DType::Q8_1, DType::Q2_K,   DType::Q3_K,  DType::Q4_K,
    DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};

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
// Accepts every dtype_name ("f32", "bf16", "q8_0", "q4_k", "iq4_xs", ...), case-insensitive.
std::optional<DType> dtype_from_name(std::string_view name);
// Elements per block (1 for float types, 32 for legacy quants and iq4_nl, 256 for K-quants and
// iq4_xs).
int64_t dtype_block_elems(DType dtype);
// Bytes per block.
int64_t dtype_block_bytes(DType dtype);
// Bytes of a row of `n` elements; throws ember::Error if n is not a multiple of the block size.
int64_t dtype_row_bytes(DType dtype, int64_t n);
bool dtype_is_quantized(DType dtype);
// What a quantizer stores a matrix with rows of `cols` values in when `wanted` does not fit (rows
// not a multiple of its block), as llama.cpp's quantizer decides: q2_k/q3_k/iq4_xs -> iq4_nl,
// q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0; if that does not fit either (or `wanted` is a type of
// 32), `float_fallback`. Returns `wanted` when it fits.
DType dtype_fitting_row(DType wanted, int64_t cols, DType float_fallback);
// The K-quants and iq4_xs: blocks of 256 values.
bool dtype_is_super_block(DType dtype);

}  // namespace ember
