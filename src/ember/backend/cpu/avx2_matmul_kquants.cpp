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
#include <cstring>

#include "ember/backend/cpu/avx2_block_unpack.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/quant_blocks.h"

namespace ember::cpu::avx2 {
namespace {

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

// q4_k / q5_k scales and mins, unpacked by whole 32-bit words (k_scale_min, four sub-blocks at
// a time): byte j of sc / mn is sub-block j's 6-bit scale / min. Bytes 0-3 of the 12 hold scales
// 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 likewise the mins; bytes 8-11 the
// low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble).
struct KScalesMins {
  __m256i scales;  // the 8 scales as int16, in both 128-bit halves
  __m256 mins;     // the 8 mins as f32, lane j
};

EMBER_AVX2_INLINE KScalesMins unpack_k_scales_mins(const uint8_t* s) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3f3f3f3f;
  const uint32_t sc_hi = (c & 0x0f0f0f0f) | (((a >> 6) & 0x03030303) << 4);
  const uint32_t mn_lo = b & 0x3f3f3f3f;
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0f) | (((b >> 6) & 0x03030303) << 4);
  const __m128i sc =
      _mm_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), 0, 0));
  const __m128i mn = _mm_setr_epi32(static_cast<int>(mn_lo), static_cast<int>(mn_hi), 0, 0);
  return {_mm256_broadcastsi128_si256(sc), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn))};
}

// Scale j of unpacked.scales in every int16 lane.
EMBER_AVX2_INLINE __m256i scale_of(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales,
                             _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}

// R rows of q4_k / q5_k times one token. Per super-block the integer sums of each activation
// block are scaled by its d_x (two FMA chains), then by the row's d; the mins' part is
// dmin * sum_j min_j * (d_x * sum(x))_j as one 8-lane FMA. Each row's operations are the same for
// every R, so the four-row tile gives the single-row dot's bits.
template <typename Block, bool kFifthBit, int R>
EMBER_AVX2_INLINE void rows_dot_q45_k(const uint8_t* row, int64_t row_bytes, const BlockQ8Act* x,
                                      int64_t K, float* y) {
  __m256 acc[R], acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = acc_min[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    // d_x * sum(x) of the 8 activation blocks, lane j.
    const __m256 x_sums = _mm256_setr_ps(
        x[0].d * static_cast<float>(x[0].sum), x[1].d * static_cast<float>(x[1].sum),
        x[2].d * static_cast<float>(x[2].sum), x[3].d * static_cast<float>(x[3].sum),
        x[4].d * static_cast<float>(x[4].sum), x[5].d * static_cast<float>(x[5].sum),
        x[6].d * static_cast<float>(x[6].sum), x[7].d * static_cast<float>(x[7].sum));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Block& b = reinterpret_cast<const Block*>(row + r * row_bytes)[sb];
      // Decode streams the matrix from DRAM: ask for this super-block of the row R rows on (the
      // next tile's, or a row ahead) while this one computes. Hints only: the bits do not change.
      const auto* ahead = reinterpret_cast<const char*>(&b) + R * row_bytes;
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      _mm_prefetch(ahead + sizeof(Block) - 1, _MM_HINT_T0);
      const uint8_t* qh = nullptr;
      if constexpr (kFifthBit) qh = b.qh;
      const KScalesMins sm = unpack_k_scales_mins(b.scales);
      __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int j = 0; j < 8; j += 2) {
        const __m256i i0 = dot_unsigned(q45_quants<kFifthBit>(b.qs, qh, j), load32(x[j].qs),
                                        scale_of(sm.scales, j));
        const __m256i i1 = dot_unsigned(q45_quants<kFifthBit>(b.qs, qh, j + 1), load32(x[j + 1].qs),
                                        scale_of(sm.scales, j + 1));
        t0 = acc_block(i0, x[j].d, t0);
        t1 = acc_block(i1, x[j + 1].d, t1);
      }
      acc[r] = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), _mm256_set1_ps(_cvtsh_ss(b.d)), acc[r]);
      acc_min[r] = _mm256_fmadd_ps(_mm256_mul_ps(sm.mins, _mm256_set1_ps(_cvtsh_ss(b.dmin))),
                                   x_sums, acc_min[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(acc[r]) - hsum(acc_min[r]);
}

template <typename Block, bool kFifthBit>
EMBER_AVX2 float row_dot_q45_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  float y;
  rows_dot_q45_k<Block, kFifthBit, 1>(row, 0, x, K, &y);
  return y;
}

template <typename Block, bool kFifthBit>
EMBER_AVX2 void row_dot4_q45_k(const uint8_t* row, int64_t row_bytes, const BlockQ8Act* x,
                               int64_t K, float* y) {
  rows_dot_q45_k<Block, kFifthBit, 4>(row, row_bytes, x, K, y);
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

// The 16 int8 scales of a q6_k super-block as int16, scales 0-7 in `low` and 8-15 in `high`
// (each in both 128-bit halves), so one shuffle puts scale 2j in the low half's lanes and scale
// 2j + 1 in the high half's (activation block j's two sub-blocks of 16).
struct Q6Scales {
  __m256i low, high;
};

EMBER_AVX2_INLINE Q6Scales unpack_q6_scales(const int8_t* s) {
  const __m128i all = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  return {_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(all)),
          _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(all, 8)))};
}

EMBER_AVX2_INLINE __m256i q6_scale_pair(const Q6Scales& s, int j) {
  const int e = (2 * j) % 8;  // int16 element of scale 2j within its half (2j + 1 is next)
  const __m256i idx =
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((2 * e + 3) << 8 | (2 * e + 2))),
                       _mm_set1_epi16(static_cast<int16_t>((2 * e + 1) << 8 | 2 * e)));
  return _mm256_shuffle_epi8(j < 4 ? s.low : s.high, idx);
}

EMBER_AVX2 float row_dot_q6_k(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(row);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / kSuperBlock; ++sb, x += 8) {
    const BlockQ6_K& b = blocks[sb];
    // The same bytes 4 KiB on (the rows after this one): decode streams the matrix from DRAM.
    const auto* ahead = reinterpret_cast<const char*>(&b) + 4096;
    for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    const Q6Scales scales = unpack_q6_scales(b.scales);
    __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j += 2) {
      const __m256i i0 = dot_signed(q6_quants(b, j), load32(x[j].qs), q6_scale_pair(scales, j));
      const __m256i i1 =
          dot_signed(q6_quants(b, j + 1), load32(x[j + 1].qs), q6_scale_pair(scales, j + 1));
      t0 = acc_block(i0, x[j].d, t0);
      t1 = acc_block(i1, x[j + 1].d, t1);
    }
    acc = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), _mm256_set1_ps(_cvtsh_ss(b.d)), acc);
  }
  return hsum(acc);
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

QuantRowDot4 kquant_row_dot4(DType dtype) {
  switch (dtype) {
    case DType::Q4_K:
      return row_dot4_q45_k<BlockQ4_K, false>;
    case DType::Q5_K:
      return row_dot4_q45_k<BlockQ5_K, true>;
    default:
      return nullptr;
  }
}

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
