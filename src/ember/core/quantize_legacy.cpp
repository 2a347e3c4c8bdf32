// The legacy blocks of 32 beyond q8_0/q4_0 (layouts in quant_blocks.h):
//   q4_1 / q5_1: value = d * u + m, u in 0..15 / 0..31: the searched affine fit (fit_affine);
//   q5_0:        value = d * (u - 16): the searched symmetric fit over the integers -16..15;
//   q8_1:        d = max|x| / 127, q = round(x / d), s = d * sum(q) (as activations are
//                quantized, so a weight row and an activation row hold the same thing).
// The searched scales are rounded to f16 before the values are snapped, so every value takes the
// level nearest to it under the scale that is actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/core/quantize_blocks.h"

namespace ember::quant {
namespace {

// Element j of a block of 32 keeps its low 4 bits in byte j % 16: the low nibble for j < 16.
void pack_nibbles(const uint8_t* u, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((u[j] & 0x0f) | (u[j + 16] & 0x0f) << 4);
}

// The fifth bit of element j is bit j of a little-endian uint32.
void pack_fifth_bits(const uint8_t* u, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((u[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

template <typename Block>
void store(void* out, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(out) + b * static_cast<int64_t>(sizeof(Block)), &blk,
              sizeof(Block));
}

// q4_1 / q5_1 share everything but the width of u: the f16 (d, m) of the search, then u snapped
// to them.
template <typename Block>
Block affine_block(const float* x, int nmax) {
  const AffineFit fit = fit_affine(x, 32, nmax, /*nonpositive_offset=*/false);
  Block blk{};
  blk.d = f16_finite(fit.scale);
  blk.m = f16_finite(fit.offset);
  uint8_t u[32];
  snap_affine(x, 32, f16_to_f32(blk.d), f16_to_f32(blk.m), nmax, u);
  pack_nibbles(u, blk.qs);
  if constexpr (requires { blk.qh; }) pack_fifth_bits(u, blk.qh);
  return blk;
}

}  // namespace

void quantize_row_q4_1(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) store(out, b, affine_block<BlockQ4_1>(x + 32 * b, 15));
}

void quantize_row_q5_1(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) store(out, b, affine_block<BlockQ5_1>(x + 32 * b, 31));
}

void quantize_row_q5_0(const float* x, void* out, int64_t n) {
  const Levels levels = Levels::integers(-16, 15);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    BlockQ5_0 blk{};
    blk.d = f16_finite(fit_scale(xb, 32, levels).scale);
    uint8_t u[32];  // level index = q + 16, the stored u
    snap_to_scale(xb, 32, f16_to_f32(blk.d), levels, u);
    pack_nibbles(u, blk.qs);
    pack_fifth_bits(u, blk.qh);
    store(out, b, blk);
  }
}

void quantize_row_q8_1(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // As q8_0: the quants use the exact float scale; only the stored one is rounded.
    const float d = amax / 127.0f;
    BlockQ8_1 blk{};
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = d != 0 ? static_cast<int>(std::lround(xb[j] / d)) : 0;
      blk.qs[j] = static_cast<int8_t>(std::clamp(q, -127, 127));
      sum += blk.qs[j];
    }
    blk.d = f16_finite(d);
    blk.s = f16_finite(d * static_cast<float>(sum));
    store(out, b, blk);
  }
}

}  // namespace ember::quant
