// The spec of every block type in code: each function writes the values of one block in element
// order (see quant_blocks.h for the layouts).
#include "ember/core/dequantize.h"

#include <cstring>

#include "ember/core/half.h"
#include "ember/core/quant_blocks.h"

namespace ember {
namespace {

// Legacy blocks of 32: byte j % 16 holds element j's low 4 bits (low nibble for j < 16).
inline int nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
}

inline int fifth_bit(const uint8_t qh[4], int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return static_cast<int>((bits >> j) & 1);
}

void block_q8_0(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

void block_q4_0(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(nibble(b.qs, j) - 8);
}

void block_q4_1(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(nibble(b.qs, j)) + m;
}

void block_q5_0(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) {
    y[j] = d * static_cast<float>((nibble(b.qs, j) | fifth_bit(b.qh, j) << 4) - 16);
  }
}

void block_q5_1(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 32; ++j) {
    y[j] = d * static_cast<float>(nibble(b.qs, j) | fifth_bit(b.qh, j) << 4) + m;
  }
}

void block_q8_1(const BlockQ8_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

void block_iq4_nl(const BlockIQ4_NL& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(kIq4nlValues[nibble(b.qs, j)]);
}

// Super-blocks with 2-bit fields (q2_k, q3_k): each half of 128 values reads 32 bytes of qs; its
// 8 sub-blocks of 16 are the 4 bit pairs (shift 0, 2, 4, 6) of bytes 0-15, then of bytes 16-31,
// interleaved: sub-block 2s uses bytes 0-15 at shift 2s, sub-block 2s + 1 bytes 16-31.
// Element e of a super-block: half h = e / 128, s = (e % 128) / 32, byte 32h + (e % 32), shift 2s.

void block_q2_k(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int sub = e / 16;  // = 8h + 2s + (l >= 16)
    const int q = (b.qs[32 * h + l] >> (2 * s)) & 3;
    y[e] = d * static_cast<float>(b.scales[sub] & 0x0f) * static_cast<float>(q) -
           dmin * static_cast<float>(b.scales[sub] >> 4);
  }
}

void block_q3_k(const BlockQ3_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int low = (b.qs[32 * h + l] >> (2 * s)) & 3;
    // hmask bit 4h + s of byte l: the high bit (clear means the value is 4 lower).
    const bool high = (b.hmask[l] >> (4 * h + s)) & 1;
    const int q = low - (high ? 0 : 4);
    y[e] = d * static_cast<float>(k3_scale(b.scales, e / 16) - 32) * static_cast<float>(q);
  }
}

// q4_k / q5_k: each 64 values read 32 bytes of qs, the low nibbles first (sub-block 2p), then the
// high ones (sub-block 2p + 1). q5_k's fifth bit of element e is bit e / 32 of qh[e % 32].
void block_q4_k(const BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, byte = 32 * (sub / 2) + e % 32;
    const int q = sub % 2 == 0 ? (b.qs[byte] & 0x0f) : (b.qs[byte] >> 4);
    uint8_t sc, m;
    k_scale_min(b.scales, sub, &sc, &m);
    y[e] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}

void block_q5_k(const BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, byte = 32 * (sub / 2) + e % 32;
    const int low = sub % 2 == 0 ? (b.qs[byte] & 0x0f) : (b.qs[byte] >> 4);
    const int q = low | (((b.qh[e % 32] >> sub) & 1) << 4);
    uint8_t sc, m;
    k_scale_min(b.scales, sub, &sc, &m);
    y[e] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}

// q6_k: each half of 128 values reads 64 bytes of ql and 32 of qh. Quarter s (32 values) of a
// half takes its low 4 bits from ql[64h + 32(s % 2) + l] (low nibble for s < 2, high for s >= 2)
// and its top 2 bits from bits 2s of qh[32h + l]; sub-blocks of 16 take one int8 scale each.
void block_q6_k(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = b.ql[64 * h + 32 * (s % 2) + l];
    const int low = s < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
    const int high = (b.qh[32 * h + l] >> (2 * s)) & 3;
    const int q = (low | high << 4) - 32;
    y[e] = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(q);
  }
}

void block_q8_k(const BlockQ8_K& b, float* y) {
  for (int e = 0; e < 256; ++e) y[e] = b.d * static_cast<float>(b.qs[e]);
}

// iq4_xs: sub-block ib's 32 values come from bytes 16ib..16ib+15 of qs, low nibbles then high.
void block_iq4_xs(const BlockIQ4_XS& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) {
    const int ib = e / 32;
    const float dl = d * static_cast<float>(iq4_xs_scale(b, ib) - 32);
    y[e] = dl * static_cast<float>(kIq4nlValues[nibble(b.qs + 16 * ib, e % 32)]);
  }
}

template <typename Block, int64_t kElems = kQuantBlock>
void blocks(const void* row, float* out, int64_t n, void (*one)(const Block&, float*)) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n / kElems; ++i) {
    Block blk;
    std::memcpy(&blk, b + i * sizeof(Block), sizeof(Block));  // rows need not be aligned
    one(blk, out + i * kElems);
  }
}

void halves(const void* row, float* out, int64_t n, float (*widen)(uint16_t)) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    out[i] = widen(h);
  }
}

}  // namespace

void dequantize_row(DType dtype, const void* row, float* out, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      return halves(row, out, n, f16_to_f32);
    case DType::BF16:
      return halves(row, out, n, bf16_to_f32);
    case DType::Q8_0:
      return blocks<BlockQ8_0>(row, out, n, block_q8_0);
    case DType::Q4_0:
      return blocks<BlockQ4_0>(row, out, n, block_q4_0);
    case DType::Q4_1:
      return blocks<BlockQ4_1>(row, out, n, block_q4_1);
    case DType::Q5_0:
      return blocks<BlockQ5_0>(row, out, n, block_q5_0);
    case DType::Q5_1:
      return blocks<BlockQ5_1>(row, out, n, block_q5_1);
    case DType::Q8_1:
      return blocks<BlockQ8_1>(row, out, n, block_q8_1);
    case DType::Q2_K:
      return blocks<BlockQ2_K, kSuperBlock>(row, out, n, block_q2_k);
    case DType::Q3_K:
      return blocks<BlockQ3_K, kSuperBlock>(row, out, n, block_q3_k);
    case DType::Q4_K:
      return blocks<BlockQ4_K, kSuperBlock>(row, out, n, block_q4_k);
    case DType::Q5_K:
      return blocks<BlockQ5_K, kSuperBlock>(row, out, n, block_q5_k);
    case DType::Q6_K:
      return blocks<BlockQ6_K, kSuperBlock>(row, out, n, block_q6_k);
    case DType::Q8_K:
      return blocks<BlockQ8_K, kSuperBlock>(row, out, n, block_q8_k);
    case DType::IQ4_NL:
      return blocks<BlockIQ4_NL>(row, out, n, block_iq4_nl);
    case DType::IQ4_XS:
      return blocks<BlockIQ4_XS, kSuperBlock>(row, out, n, block_iq4_xs);
  }
}

}  // namespace ember
