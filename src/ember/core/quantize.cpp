// Float rows -> storage rows. q8_0/q4_0 round exactly like GGUF's reference quantizers, so that a
// model quantized here and one quantized by llama.cpp's tools hold the same bytes; the other block
// types search their scales for least squared error (quantize_row_blocks, quantize_blocks.h).
#include "ember/core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/core/half.h"

namespace ember {

// x: [n] with n % 32 == 0 -> n / 32 blocks. d = max|x| / 127; q = round-half-away(x / d).
void quantize_row_q8_0(const float* x, BlockQ8_0* out, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // The quants use the exact float scale; only the stored scale is rounded to f16.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQuantBlock; ++j) {
      out[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
    }
  }
}

// x: [n] with n % 32 == 0. d = (the signed value of largest magnitude) / -8, so that value maps to
// quant 0 (= -8 after the offset) and the other end clamps at 15 (= +7).
void quantize_row_q4_0(const float* x, BlockQ4_0* out, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQuantBlock; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      // x * id + 8.5 lies in [0.5, 16.5]: truncation rounds x * id + 8 half-up.
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j + 16] * id + 8.5f)));
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void convert_row(const float* x, DType dtype, void* out, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::F16: {
      auto* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      break;
    }
    case DType::BF16: {
      auto* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      break;
    }
    case DType::Q8_0:
      dtype_row_bytes(dtype, n);  // throws unless n is a multiple of the block size
      quantize_row_q8_0(x, static_cast<BlockQ8_0*>(out), n);
      break;
    case DType::Q4_0:
      dtype_row_bytes(dtype, n);
      quantize_row_q4_0(x, static_cast<BlockQ4_0*>(out), n);
      break;
    default:
      dtype_row_bytes(dtype, n);
      quantize_row_blocks(x, dtype, out, n);
      break;
  }
}

}  // namespace ember
