// AVX2 row dots and panel dequantizers of the K-quants q2_k, q3_k, q4_k, q5_k, q6_k
// (quant_row_dot.h; layouts in core/quant_blocks.h, exact values in core/dequantize.cpp).
//
// A super-block of 256 weights meets 8 activation blocks of 32 (BlockQ8Act). For each of them the
// weights' 32 quants are unpacked into one vector of bytes, multiplied by the activations' bytes
// with maddubs (unsigned x signed -> pairs of int16) and summed to 8 int32 lanes by madd against
// the sub-block scales as int16 (so the integer scale is applied before anything is rounded): one
// madd per activation block covers two sub-blocks of 16 at once, scale s0 in the low 128 bits and
// s1 in the high ones. Then one FMA with d * d_x per activation block (d_x differs per block of
// 32, so the integer sums cannot be pooled over the super-block).
//   Unsigned quants (q2_k, q4_k, q5_k) go into maddubs as they are; their "- dmin * min" part is
//   dmin * d_x * min * sum(x) per sub-block, with sum(x) from the activation block (q4_k/q5_k:
//   BlockQ8Act::sum over 32) or summed by a maddubs against ones (q2_k: halves of 16).
//   Signed quants (q3_k in [-4, 3], q6_k in [-32, 31]) use the sign trick: |q| times x carrying
//   q's sign.
// Bounds: |x| <= 127; maddubs pairs stay below 2 * 63 * 127 < 2^15, madd sums with 6-bit (q6_k:
// 8-bit) scales below 2^31.
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/quant_blocks.h"

namespace ember::cpu::avx2 {
namespace {

EMBER_AVX2_INLINE __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Scale s0 for the low 16 bytes' pair sums, s1 for the high 16.
EMBER_AVX2_INLINE __m256i two_scales(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                          _mm_set1_epi16(static_cast<int16_t>(s0)));
}

// sum_i u_i * x_i (u unsigned bytes) per pair, times the int16 scales, as 8 int32 lanes.
EMBER_AVX2_INLINE __m256i dot_unsigned(__m256i u, __m256i x, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scales);
}

// The same for signed quants q (|q| <= 64): |q| times x with q's sign.
EMBER_AVX2_INLINE __m256i dot_signed(__m256i q, __m256i x, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)),
                           scales);
}

// Bytes where bit `bit` of v is set: 0xff, else 0.
EMBER_AVX2_INLINE __m256i bit_set(__m256i v, int bit) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
}

// (v >> shift) & mask per byte (shift < 8; the 16-bit shift's spill-over is masked off).
EMBER_AVX2_INLINE __m256i bits(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

EMBER_AVX2_INLINE __m256 acc_block(__m256i isum, float scale, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale), acc);
}

// q4_k / q5_k: sub-block j is activation block j; `fifth` adds q5_k's high bits.
template <bool kFifthBit>
EMBER_AVX2_INLINE __m256i q45_quants(const uint8_t* qs, const uint8_t* qh, int j) {
  const __m256i packed = load32(qs + 32 * (j / 2));
  __m256i u = j % 2 == 0 ? _mm256_and_si256(packed, _mm256_set1_epi8(0x0f)) : bits(packed, 4, 0x0f);
  if constexpr (kFifthBit) {
    u = _mm256_or_si256(u, _mm256_and_si256(bit_set(load32(qh), j), _mm256_set1_epi8(16)));
  }
  return u;
}

template <typename Block, bool kFifthBit>
EMBER_AVX2 float row_dot_q45_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const auto* blocks = reinterpret_cast<const Block*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    const Block& b = blocks[sb];
    const float d = _cvtsh_ss(b.d), dmin = _cvtsh_ss(b.dmin);
    const uint8_t* qh = nullptr;
    if constexpr (kFifthBit) qh = b.qh;
    float block_mins = 0.0f;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j += 2) {
      uint8_t sc0, m0, sc1, m1;
      k_scale_min(b.scales, j, &sc0, &m0);
      k_scale_min(b.scales, j + 1, &sc1, &m1);
      const __m256i u0 = q45_quants<kFifthBit>(b.qs, qh, j);
      const __m256i u1 = q45_quants<kFifthBit>(b.qs, qh, j + 1);
      acc0 = acc_block(dot_unsigned(u0, load32(x[j].qs), _mm256_set1_epi16(sc0)), d * x[j].d, acc0);
      acc1 = acc_block(dot_unsigned(u1, load32(x[j + 1].qs), _mm256_set1_epi16(sc1)),
                       d * x[j + 1].d, acc1);
      block_mins += x[j].d * static_cast<float>(m0 * x[j].sum) +
                    x[j + 1].d * static_cast<float>(m1 * x[j + 1].sum);
    }
    mins += dmin * block_mins;
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - mins;
}

// q6_k: activation block j = 4h + s takes its low 4 bits from ql[64h + 32(s % 2) ...] (low nibble
// for s < 2) and its top 2 from bits 2s of qh[32h ...]; scales 2j and 2j + 1.
EMBER_AVX2_INLINE __m256i q6_quants(const BlockQ6_K& b, int j) {
  const int h = j / 4, s = j % 4;
  const __m256i l = load32(b.ql + 64 * h + 32 * (s % 2));
  const __m256i low = s < 2 ? _mm256_and_si256(l, _mm256_set1_epi8(0x0f)) : bits(l, 4, 0x0f);
  const __m256i high = _mm256_slli_epi16(bits(load32(b.qh + 32 * h), 2 * s, 3), 4);
  return _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
}

EMBER_AVX2 float row_dot_q6_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    const BlockQ6_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j += 2) {
      const __m256i i0 = dot_signed(q6_quants(b, j), load32(x[j].qs),
                                    two_scales(b.scales[2 * j], b.scales[2 * j + 1]));
      const __m256i i1 = dot_signed(q6_quants(b, j + 1), load32(x[j + 1].qs),
                                    two_scales(b.scales[2 * j + 2], b.scales[2 * j + 3]));
      acc0 = acc_block(i0, d * x[j].d, acc0);
      acc1 = acc_block(i1, d * x[j + 1].d, acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// q2_k / q3_k: activation block j = 4h + s reads bits 2s of qs[32h ...].
EMBER_AVX2_INLINE __m256i two_bit_quants(const uint8_t* qs, int j) {
  return bits(load32(qs + 32 * (j / 4)), 2 * (j % 4), 3);
}

EMBER_AVX2 float row_dot_q2_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const auto* blocks = reinterpret_cast<const BlockQ2_K*>(row);
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    const BlockQ2_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d), dmin = _cvtsh_ss(b.dmin);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const uint8_t s0 = b.scales[2 * j], s1 = b.scales[2 * j + 1];
      const __m256i xv = load32(x[j].qs);
      const __m256i isum = dot_unsigned(two_bit_quants(b.qs, j), xv, two_scales(s0 & 15, s1 & 15));
      const __m256i msum = dot_unsigned(ones, xv, two_scales(s0 >> 4, s1 >> 4));
      acc = acc_block(isum, d * x[j].d, acc);
      acc_min = acc_block(msum, dmin * x[j].d, acc_min);
    }
  }
  return hsum(acc) - hsum(acc_min);
}

// q3_k: q = (2 low bits) - 4 unless hmask bit j is set.
EMBER_AVX2_INLINE __m256i q3_quants(const BlockQ3_K& b, __m256i hmask, int j) {
  const __m256i high = _mm256_and_si256(bit_set(hmask, j), _mm256_set1_epi8(4));
  return _mm256_sub_epi8(_mm256_or_si256(two_bit_quants(b.qs, j), high), _mm256_set1_epi8(4));
}

EMBER_AVX2 float row_dot_q3_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const auto* blocks = reinterpret_cast<const BlockQ3_K*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    const BlockQ3_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d);
    const __m256i hmask = load32(b.hmask);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j += 2) {
      const __m256i s0 =
          two_scales(k3_scale(b.scales, 2 * j) - 32, k3_scale(b.scales, 2 * j + 1) - 32);
      const __m256i s1 =
          two_scales(k3_scale(b.scales, 2 * j + 2) - 32, k3_scale(b.scales, 2 * j + 3) - 32);
      acc0 = acc_block(dot_signed(q3_quants(b, hmask, j), load32(x[j].qs), s0), d * x[j].d, acc0);
      acc1 = acc_block(dot_signed(q3_quants(b, hmask, j + 1), load32(x[j + 1].qs), s1),
                       d * x[j + 1].d, acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// --- dequantization (prefill panels) ---------------------------------------------------------

// Keeps the compiler from fusing a multiply and the subtraction after it into one FMA: the
// format's values are (d * scale) * q - dmin * min rounded after each operation.
EMBER_AVX2_INLINE __m256 unfused(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// 32 quants (int8) of one activation block to f32: out[i] = dl * q[i] - ml, with (dl, ml) for
// the first 16 values and (dl2, ml2) for the last 16.
EMBER_AVX2_INLINE void store_block(__m256i q, float dl, float ml, float dl2, float ml2,
                                   float* out) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[c]));
    const __m256 scaled = unfused(_mm256_mul_ps(v, _mm256_set1_ps(c < 2 ? dl : dl2)));
    _mm256_storeu_ps(out + 8 * c, _mm256_sub_ps(scaled, _mm256_set1_ps(c < 2 ? ml : ml2)));
  }
}

template <typename Block, bool kFifthBit>
EMBER_AVX2 void dequantize_q45_k(const uint8_t* row, int64_t K, float* out) {
  const auto* blocks = reinterpret_cast<const Block*>(row);
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, out += kSuperBlock) {
    const Block& b = blocks[sb];
    const float d = _cvtsh_ss(b.d), dmin = _cvtsh_ss(b.dmin);
    const uint8_t* qh = nullptr;
    if constexpr (kFifthBit) qh = b.qh;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(b.scales, j, &sc, &m);
      const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
      store_block(q45_quants<kFifthBit>(b.qs, qh, j), dl, ml, dl, ml, out + 32 * j);
    }
  }
}

EMBER_AVX2 void dequantize_q6_k(const uint8_t* row, int64_t K, float* out) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(row);
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, out += kSuperBlock) {
    const BlockQ6_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d);
    for (int j = 0; j < 8; ++j) {
      store_block(q6_quants(b, j), d * static_cast<float>(b.scales[2 * j]), 0.0f,
                  d * static_cast<float>(b.scales[2 * j + 1]), 0.0f, out + 32 * j);
    }
  }
}

EMBER_AVX2 void dequantize_q2_k(const uint8_t* row, int64_t K, float* out) {
  const auto* blocks = reinterpret_cast<const BlockQ2_K*>(row);
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, out += kSuperBlock) {
    const BlockQ2_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d), dmin = _cvtsh_ss(b.dmin);
    for (int j = 0; j < 8; ++j) {
      const uint8_t s0 = b.scales[2 * j], s1 = b.scales[2 * j + 1];
      store_block(two_bit_quants(b.qs, j), d * static_cast<float>(s0 & 15),
                  dmin * static_cast<float>(s0 >> 4), d * static_cast<float>(s1 & 15),
                  dmin * static_cast<float>(s1 >> 4), out + 32 * j);
    }
  }
}

EMBER_AVX2 void dequantize_q3_k(const uint8_t* row, int64_t K, float* out) {
  const auto* blocks = reinterpret_cast<const BlockQ3_K*>(row);
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, out += kSuperBlock) {
    const BlockQ3_K& b = blocks[sb];
    const float d = _cvtsh_ss(b.d);
    const __m256i hmask = load32(b.hmask);
    for (int j = 0; j < 8; ++j) {
      store_block(q3_quants(b, hmask, j), d * static_cast<float>(k3_scale(b.scales, 2 * j) - 32),
                  0.0f, d * static_cast<float>(k3_scale(b.scales, 2 * j + 1) - 32), 0.0f,
                  out + 32 * j);
    }
  }
}

using RowDequantizer = void (*)(const uint8_t* row, int64_t K, float* out);

RowDequantizer kquant_dequantizer(DType dtype) {
  switch (dtype) {
    case DType::Q2_K:
      return dequantize_q2_k;
    case DType::Q3_K:
      return dequantize_q3_k;
    case DType::Q4_K:
      return dequantize_q45_k<BlockQ4_K, false>;
    case DType::Q5_K:
      return dequantize_q45_k<BlockQ5_K, true>;
    case DType::Q6_K:
      return dequantize_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

QuantRowDot kquant_row_dot(DType dtype) {
  switch (dtype) {
    case DType::Q2_K:
      return row_dot_q2_k;
    case DType::Q3_K:
      return row_dot_q3_k;
    case DType::Q4_K:
      return row_dot_q45_k<BlockQ4_K, false>;
    case DType::Q5_K:
      return row_dot_q45_k<BlockQ5_K, true>;
    case DType::Q6_K:
      return row_dot_q6_k;
    default:
      return nullptr;
  }
}

bool kquant_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo) {
  const RowDequantizer dequantize = kquant_dequantizer(dtype);
  if (dequantize == nullptr) return false;
  for (int64_t i = 0; i < rows; ++i) dequantize(base + i * row_bytes, K, out + i * ldo);
  return true;
}

}  // namespace ember::cpu::avx2
