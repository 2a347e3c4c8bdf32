// The K-quants: super-blocks of 256 values (layouts in quant_blocks.h, bit positions in
// dequantize.cpp).
//   q2_k, q4_k, q5_k: value = d * scale * q - dmin * min per sub-block (16 x 16 values with 4-bit
//     scale/min and 2-bit q; 8 x 32 with 6-bit scale/min and 4- or 5-bit q): quantize_affine_super.
//   q3_k, q6_k: value = d * scale * q (16 x 16 values; signed 6-bit scales and q in -4..3, or int8
//     scales and q in -32..31): quantize_symmetric_super.
//   q8_k: an activation type, kept simple: f32 d = max|x| / 127, q = round(x / d) in -127..127
//     (symmetric, so the sign of d is always +), bsums the sum of each 16 q.
// This file only packs what those searches chose into the bits of each layout.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/core/quantize_blocks.h"

namespace ember::quant {
namespace {

template <typename Block>
void store(void* out, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(out) + b * static_cast<int64_t>(sizeof(Block)), &blk,
              sizeof(Block));
}

// q4_k / q5_k: 8 x (6-bit scale, 6-bit min) in 12 bytes, the inverse of k_scale_min: sub-blocks
// 0-3 in the low 6 bits of bytes j (scale) and j + 4 (min); sub-blocks 4-7 in byte j + 4 (scale
// low nibble, min high nibble) with their top 2 bits in the top bits of bytes j - 4 and j.
void pack_scale_min(const int* scales, const int* mins, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(scales[j] | (scales[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>(mins[j] | (mins[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | (mins[j + 4] & 0x0f) << 4);
  }
}

// q3_k: 16 x 6-bit scales (stored value + 32) in 12 bytes, the inverse of k3_scale: low nibbles
// of scales 0-7 / 8-15 in the low / high nibbles of bytes 0-7, the top 2 bits of scale i at bits
// 2 * (i / 4) of byte 8 + i % 4.
void pack_k3_scales(const int* scales, uint8_t* s) {
  int u[16];
  for (int i = 0; i < 16; ++i) u[i] = scales[i] + 32;
  for (int i = 0; i < 8; ++i) s[i] = static_cast<uint8_t>((u[i] & 0x0f) | (u[i + 8] & 0x0f) << 4);
  for (int r = 0; r < 4; ++r) {
    int byte = 0;
    for (int g = 0; g < 4; ++g) byte |= ((u[4 * g + r] >> 4) & 3) << (2 * g);
    s[8 + r] = static_cast<uint8_t>(byte);
  }
}

// Super-blocks with 2-bit fields: element e's bits sit at shift 2 * ((e % 128) / 32) of byte
// 32 * (e / 128) + e % 32.
void pack_2bit(const uint8_t* q, uint8_t* qs) {
  for (int e = 0; e < kSuperBlock; ++e) {
    const int byte = 32 * (e / 128) + e % 32, shift = 2 * ((e % 128) / 32);
    qs[byte] = static_cast<uint8_t>(qs[byte] | (q[e] & 3) << shift);
  }
}

// q4_k / q5_k: sub-block s of 32 takes the low (s even) or high (s odd) nibbles of bytes
// 32 * (s / 2) .. + 31.
void pack_4bit_k(const uint8_t* q, uint8_t* qs) {
  for (int e = 0; e < kSuperBlock; ++e) {
    const int sub = e / 32, byte = 32 * (sub / 2) + e % 32;
    qs[byte] = static_cast<uint8_t>(qs[byte] | (q[e] & 0x0f) << (4 * (sub % 2)));
  }
}

template <typename Block>
Block affine_k_block(const float* x, int sub, int nmax, int imax) {
  const AffineSuper s = quantize_affine_super(x, sub, nmax, imax);
  Block blk{};
  blk.d = f16_finite(s.d);
  blk.dmin = f16_finite(s.dmin);
  if constexpr (sizeof(Block) == sizeof(BlockQ2_K)) {
    for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<uint8_t>(s.scales[j] | s.mins[j] << 4);
    pack_2bit(s.q, blk.qs);
  } else {
    pack_scale_min(s.scales, s.mins, blk.scales);
    pack_4bit_k(s.q, blk.qs);
    if constexpr (requires { blk.qh; }) {  // q5_k: the fifth bit of e is bit e / 32 of qh[e % 32]
      for (int e = 0; e < kSuperBlock; ++e) {
        blk.qh[e % 32] = static_cast<uint8_t>(blk.qh[e % 32] | ((s.q[e] >> 4) & 1) << (e / 32));
      }
    }
  }
  return blk;
}

BlockQ3_K q3_k_block(const float* x) {
  const SymmetricSuper s = quantize_symmetric_super(x, 16, Levels::integers(-4, 3), -32, 31);
  BlockQ3_K blk{};
  blk.d = f16_finite(s.d);
  pack_k3_scales(s.scales, blk.scales);
  pack_2bit(s.idx, blk.qs);  // idx = q + 4: its 2 low bits, and the high bit in hmask
  for (int e = 0; e < kSuperBlock; ++e) {
    const int l = e % 32, bit = 4 * (e / 128) + (e % 128) / 32;
    blk.hmask[l] = static_cast<uint8_t>(blk.hmask[l] | ((s.idx[e] >> 2) & 1) << bit);
  }
  return blk;
}

// q6_k: u = q + 32 (the level index); quarter s of half h takes its low 4 bits from
// ql[64h + 32(s % 2) + l] (low nibble for s < 2) and its top 2 bits from bits 2s of qh[32h + l].
BlockQ6_K q6_k_block(const float* x) {
  const SymmetricSuper s = quantize_symmetric_super(x, 16, Levels::integers(-32, 31), -128, 127);
  BlockQ6_K blk{};
  blk.d = f16_finite(s.d);
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(s.scales[j]);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, quarter = (e % 128) / 32, l = e % 32, u = s.idx[e];
    uint8_t& low = blk.ql[64 * h + 32 * (quarter % 2) + l];
    low = static_cast<uint8_t>(low | (u & 0x0f) << (quarter < 2 ? 0 : 4));
    blk.qh[32 * h + l] = static_cast<uint8_t>(blk.qh[32 * h + l] | (u >> 4) << (2 * quarter));
  }
  return blk;
}

BlockQ8_K q8_k_block(const float* x) {
  float amax = 0;
  for (int e = 0; e < kSuperBlock; ++e) amax = std::max(amax, std::fabs(x[e]));
  BlockQ8_K blk{};
  blk.d = amax / 127.0f;
  for (int e = 0; e < kSuperBlock; ++e) {
    const int q = blk.d != 0 ? static_cast<int>(std::lround(x[e] / blk.d)) : 0;
    blk.qs[e] = static_cast<int8_t>(std::clamp(q, -127, 127));
    blk.bsums[e / 16] = static_cast<int16_t>(blk.bsums[e / 16] + blk.qs[e]);
  }
  return blk;
}

}  // namespace

void quantize_row_q2_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    store(out, b, affine_k_block<BlockQ2_K>(x + kSuperBlock * b, 16, 3, 15));
  }
}

void quantize_row_q3_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) store(out, b, q3_k_block(x + kSuperBlock * b));
}

void quantize_row_q4_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    store(out, b, affine_k_block<BlockQ4_K>(x + kSuperBlock * b, 32, 15, 63));
  }
}

void quantize_row_q5_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    store(out, b, affine_k_block<BlockQ5_K>(x + kSuperBlock * b, 32, 31, 63));
  }
}

void quantize_row_q6_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) store(out, b, q6_k_block(x + kSuperBlock * b));
}

void quantize_row_q8_k(const float* x, void* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) store(out, b, q8_k_block(x + kSuperBlock * b));
}

}  // namespace ember::quant
