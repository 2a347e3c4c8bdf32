#include "ember/backend/kv_channel_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/core/half.h"

namespace ember {

int64_t kv_channel_row_bytes(int64_t head_dim, int64_t block_size) {
  // Even, so that every region (and its f16 scales) starts 2-byte aligned.
  const int64_t bytes = head_dim / 2 + (4 * head_dim + block_size - 1) / block_size;
  return (bytes + 1) / 2 * 2;
}

std::string kv_channel_problem(DType k_dtype, int64_t head_dim, int64_t block_size) {
  if (k_dtype != DType::Q4_0) {
    return std::string("per-channel K scales are a q4_0 K cache's layout; this K cache is ") +
           dtype_name(k_dtype);
  }
  if (head_dim <= 0 || head_dim % 8 != 0) {
    return "per-channel K scales need head_dim a multiple of 8; this model's is " +
           std::to_string(head_dim);
  }
  if (head_dim > 512) {
    return "per-channel K scales need head_dim at most 512; this model's is " +
           std::to_string(head_dim);
  }
  if (block_size < 2) {
    return "per-channel K scales need at least 2 tokens per KV block; the block size is " +
           std::to_string(block_size);
  }
  return "";
}

void kv_channel_quantize(const uint16_t* rows, int64_t head_dim, int64_t block_size,
                         uint8_t* region) {
  auto* scale = reinterpret_cast<uint16_t*>(region);
  auto* min = scale + head_dim;
  uint8_t* codes = region + 4 * head_dim;
  const int64_t half = head_dim / 2;
  std::memset(codes, 0, static_cast<size_t>(block_size * half));
  for (int64_t c = 0; c < head_dim; ++c) {
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t r = 0; r < block_size; ++r) {
      const float x = f16_to_f32(rows[r * head_dim + c]);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    // Codes are chosen against the stored (f16-rounded) minimum and scale, so the rounding of
    // those is not added to every value's error.
    min[c] = f32_to_f16(lo);
    const float m = f16_to_f32(min[c]);
    scale[c] = f32_to_f16((hi - m) / 15.0f);
    const float d = f16_to_f32(scale[c]);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const int shift = c < half ? 0 : 4;
    const int64_t lane = c % half;  // column lane / 4, byte lane % 4 of each word
    for (int64_t r = 0; r < block_size; ++r) {
      const float x = f16_to_f32(rows[r * head_dim + c]);
      const long q = std::lround((x - m) * id);
      const auto code = static_cast<uint8_t>(std::clamp<long>(q, 0, 15));
      codes[4 * (lane / 4 * block_size + r) + lane % 4] |= static_cast<uint8_t>(code << shift);
    }
  }
}

void kv_channel_read_row(const uint8_t* region, int64_t slot, int64_t head_dim, int64_t block_size,
                         float* out) {
  const auto* scale = reinterpret_cast<const uint16_t*>(region);
  const uint16_t* min = scale + head_dim;
  for (int64_t c = 0; c < head_dim; ++c) {
    const auto code = static_cast<float>(kv_channel_code(region, slot, c, head_dim, block_size));
    out[c] = std::fma(f16_to_f32(scale[c]), code, f16_to_f32(min[c]));
  }
}

}  // namespace ember
