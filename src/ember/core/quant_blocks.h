// GGML's block-quantized weight types beyond q8_0/q4_0 (dtype.h), byte for byte as GGUF stores
// them, so tensors are used zero-copy. Written from the format's description; the exact meaning of
// every bit is dequantize_row() in dequantize.cpp, which the quant-zoo tests check against float64
// references computed independently of ember.
//
// Legacy types, blocks of 32 values (element j of a block):
//   q4_1: d, m (f16), 16 bytes of nibbles;   value = d * u + m, u = nibble (byte j % 16: low nibble
//         for j < 16, high for j >= 16)
//   q5_0: d (f16), qh (32 high bits, bit j), 16 bytes of nibbles; value = d * (u - 16),
//         u = nibble | (bit j of qh) << 4
//   q5_1: d, m (f16), qh, nibbles;           value = d * u + m (u as q5_0)
//   q8_1: d, s = d * sum(q) (f16), 32 x int8; value = d * q
//   iq4_nl: d (f16), nibbles as q4_0;        value = d * kIq4nlValues[nibble]
//
// Super-block types, blocks of 256 values (kSuperBlock):
//   q2_k: 16 sub-blocks of 16; scales[i] = scale (low 4 bits) | min (high 4 bits);
//         value = d * scale * q - dmin * min, q 2 bits
//   q3_k: 16 sub-blocks of 16; 6-bit scales s (value s - 32) packed in 12 bytes; q = 2 low bits
//         minus 4 unless the hmask bit is set; value = d * (s - 32) * q
//   q4_k: 8 sub-blocks of 32; 6-bit scale and min each, packed in 12 bytes (k_scale_min);
//         value = d * scale * q - dmin * min, q 4 bits
//   q5_k: q4_k plus a fifth bit per value in qh
//   q6_k: 16 sub-blocks of 16; int8 scales; q 6 bits (4 in ql, 2 in qh) minus 32;
//         value = d * scale * q
//   q8_k: f32 d, 256 x int8, sums of each 16 (an activation type; weights rarely use it)
//   iq4_xs: 8 sub-blocks of 32, 6-bit scales ls (value ls - 32); value = d * (ls - 32) *
//         kIq4nlValues[nibble]
// Where the bits of element j sit inside each super-block type is spelled out in dequantize.cpp.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"

namespace ember {

inline constexpr int kSuperBlock = 256;

struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // little-endian uint32: bit j is the fifth bit of element j
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ2_K {
  uint8_t scales[16];  // per sub-block of 16: scale | min << 4
  uint8_t qs[64];      // 2 bits per value
  uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[32];   // the high bit of each value (set: q >= 0)
  uint8_t qs[64];      // low 2 bits per value
  uint8_t scales[12];  // 16 x 6-bit scales (k3_scale)
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min) (k_scale_min)
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[128];  // low 4 bits
  uint8_t qh[64];   // high 2 bits
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sum of each 16 qs
};
static_assert(sizeof(BlockQ8_K) == 292);

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;    // high 2 bits of the 8 sub-block scales
  uint8_t scales_l[4];  // low 4 bits, two per byte
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The helpers below are the spec in code for host and (compiled by nvcc) CUDA device code alike.
#ifdef __CUDACC__
#define EMBER_HOST_DEVICE __host__ __device__
#else
#define EMBER_HOST_DEVICE
#endif

// The 16 levels of iq4_nl / iq4_xs: a non-uniform grid, denser near zero.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// q4_k / q5_k: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. Sub-blocks
// 0-3 keep theirs in the low 6 bits of bytes j (scale) and j + 4 (min); sub-blocks 4-7 keep the
// low 4 bits in byte j + 4 (scale low nibble, min high nibble) and the top 2 bits in the top bits
// of bytes j - 4 (scale) and j (min).
EMBER_HOST_DEVICE inline void k_scale_min(const uint8_t* s, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// q3_k: the 6-bit scale of sub-block i (0..15) from the 12 packed bytes (subtract 32 for its
// value). Low 4 bits: byte i (i < 8, low nibble) or byte i - 8 (high nibble); high 2 bits: bits
// 2 * (i / 4) of byte 8 + i % 4.
EMBER_HOST_DEVICE inline int k3_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | (high << 4);
}

// iq4_xs: the 6-bit scale of sub-block ib (0..7) (subtract 32 for its value).
EMBER_HOST_DEVICE inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}

}  // namespace ember
