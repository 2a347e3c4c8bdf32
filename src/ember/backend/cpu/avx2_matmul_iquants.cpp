// AVX2 row dots and panel dequantizers of the iq4_nl, iq4_xs weights (quant_row_dot.h).
//
// Both store 4-bit indices into kIq4nlValues, a 16-entry int8 grid. _mm256_shuffle_epi8 with the
// grid in both 128-bit lanes is that table lookup for 32 nibbles at once (an index byte < 16
// selects that byte of its lane), giving the signed weight values; the integer dot with the int8
// activations then uses the sign trick (signed_dot: |grid| <= 127, so no int16 pair saturates).
// One FMA per 32-block applies the float scale: d_w d_x (iq4_nl), d (ls - 32) d_x (iq4_xs).
//
// Panel dequantizers: the values of core/dequantize.cpp bit for bit: d * v (iq4_nl) and
// (d * (ls - 32)) * v (iq4_xs), multiplied in the same order (every product here is exact anyway:
// 11 + 5 + 7 significant bits fit f32's 24).
#include <cstddef>
#include <cstring>

#include "ember/backend/cpu/avx2_block_unpack.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/quant_blocks.h"

namespace ember::cpu::avx2 {
namespace {

constexpr int kSubBlocks = kSuperBlock / kQuantBlock;  // iq4_xs: 8 sub-blocks of 32

// The 32 weight values of 16 nibble bytes in element order (byte j: element j in the low nibble,
// j + 16 in the high one). Both 128-bit lanes get the 16 bytes, the high lane shifted right by 4
// (srlv per 64-bit half: 0, 0, 4, 4); the masked nibbles index the grid.
EMBER_AVX2_INLINE __m256i grid_values(const uint8_t* qs) {
  const __m256i nibbles = unpack_nibbles(qs);
  const __m256i grid =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  return _mm256_shuffle_epi8(grid, nibbles);
}

// sum_i w_i q_i as 8 int32 lanes: maddubs multiplies unsigned by signed bytes, so |w| meets q
// carrying w's sign (sign_epi8 negates q where w < 0).
EMBER_AVX2_INLINE __m256i signed_dot(__m256i w, __m256i q) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// acc += scale * (w . x) for one 32-block.
EMBER_AVX2_INLINE void accumulate(__m256i w, const BlockQ8Act& x, float scale, __m256* acc) {
  const __m256 lanes = _mm256_cvtepi32_ps(signed_dot(w, load32(x.qs)));
  *acc = _mm256_fmadd_ps(lanes, _mm256_set1_ps(scale), *acc);
}

// Decode streams the matrix row after row, each row too short a stream for the hardware
// prefetcher: every iteration asks for the line kPrefetchAhead bytes on, in a row a later call
// reads (Rows layout: contiguous; a prefetch never faults, so running past the matrix is
// harmless). Measured single-threaded on a 4096 x 14336 matrix (from DRAM): iq4_nl +15%, iq4_xs
// +5%; cache-resident matrices within noise. The distance is the legacy types' (4 KiB).
constexpr int64_t kPrefetchAhead = 4096;

// Blocks two at a time into two accumulators (one FMA chain per block would bound the loop).
EMBER_AVX2 float row_dot_iq4_nl(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const int64_t nb = K / kQuantBlock;
  constexpr int64_t kBytes = sizeof(BlockIQ4_NL);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p = row + b * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchAhead, _MM_HINT_T0);
    accumulate(grid_values(p + offsetof(BlockIQ4_NL, qs)), x[b], half_at(p) * x[b].d, &acc0);
    p += kBytes;
    accumulate(grid_values(p + offsetof(BlockIQ4_NL, qs)), x[b + 1], half_at(p) * x[b + 1].d,
               &acc1);
  }
  if (b < nb) {
    const uint8_t* p = row + b * kBytes;
    accumulate(grid_values(p + offsetof(BlockIQ4_NL, qs)), x[b], half_at(p) * x[b].d, &acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// iq4_xs: the 8 sub-block scales d * (ls - 32) of a super-block at once. ls = 4 low bits from
// scales_l (sub-block i: bits 4i of the 4 bytes read as one little-endian uint32) and 2 high bits
// from scales_h (bits 2i), each lane shifting by its own count.
EMBER_AVX2_INLINE __m256 iq4_xs_scales(const uint8_t* blk) {
  uint16_t high;
  int32_t low;
  std::memcpy(&high, blk + offsetof(BlockIQ4_XS, scales_h), sizeof high);
  std::memcpy(&low, blk + offsetof(BlockIQ4_XS, scales_l), sizeof low);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(low), _mm256_slli_epi32(lane, 2)), _mm256_set1_epi32(15));
  const __m256i hi = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_slli_epi32(lane, 1)), _mm256_set1_epi32(3));
  const __m256i ls = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4));
  const __m256 centered = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
  return _mm256_mul_ps(_mm256_set1_ps(half_at(blk)), centered);
}

// Sub-block i of a super-block multiplies activation block 8s + i; even ones go to acc0, odd ones
// to acc1.
EMBER_AVX2 float row_dot_iq4_xs(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const int64_t ns = K / kSuperBlock;
  constexpr int64_t kBytes = sizeof(BlockIQ4_XS);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * kBytes;
    const uint8_t* qs = blk + offsetof(BlockIQ4_XS, qs);
    const BlockQ8Act* xs = x + s * kSubBlocks;
    alignas(32) float dl[kSubBlocks];
    _mm256_store_ps(dl, iq4_xs_scales(blk));
#pragma GCC unroll 4
    for (int i = 0; i < kSubBlocks; i += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(qs + 16 * i) + kPrefetchAhead, _MM_HINT_T0);
      accumulate(grid_values(qs + 16 * i), xs[i], dl[i] * xs[i].d, &acc0);
      accumulate(grid_values(qs + 16 * (i + 1)), xs[i + 1], dl[i + 1] * xs[i + 1].d, &acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// --- Panel dequantizers ----------------------------------------------------------------------

// 32 grid values as floats times `scale`, to y[0, 32).
EMBER_AVX2_INLINE void store_scaled(__m256i w, float scale, float* y) {
  const __m256 d = _mm256_set1_ps(scale);
  const __m128i halves[2] = {_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)};
  for (int h = 0; h < 2; ++h) {
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[h]));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8)));
    _mm256_storeu_ps(y + 16 * h, _mm256_mul_ps(d, lo));
    _mm256_storeu_ps(y + 16 * h + 8, _mm256_mul_ps(d, hi));
  }
}

EMBER_AVX2 void dequantize_iq4_nl(const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                                  float* out, int64_t ldo) {
  const int64_t nb = K / kQuantBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = base + r * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + b * static_cast<int64_t>(sizeof(BlockIQ4_NL));
      store_scaled(grid_values(p + offsetof(BlockIQ4_NL, qs)), half_at(p),
                   out + r * ldo + b * kQuantBlock);
    }
  }
}

EMBER_AVX2 void dequantize_iq4_xs(const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                                  float* out, int64_t ldo) {
  const int64_t ns = K / kSuperBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = base + r * row_bytes;
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* blk = row + s * static_cast<int64_t>(sizeof(BlockIQ4_XS));
      alignas(32) float dl[kSubBlocks];
      _mm256_store_ps(dl, iq4_xs_scales(blk));
      float* y = out + r * ldo + s * kSuperBlock;
      for (int i = 0; i < kSubBlocks; ++i) {
        store_scaled(grid_values(blk + offsetof(BlockIQ4_XS, qs) + 16 * i), dl[i],
                     y + i * kQuantBlock);
      }
    }
  }
}

}  // namespace

QuantRowDot iquant_row_dot(DType dtype) {
  switch (dtype) {
    case DType::IQ4_NL:
      return row_dot_iq4_nl;
    case DType::IQ4_XS:
      return row_dot_iq4_xs;
    default:
      return nullptr;
  }
}

bool iquant_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo) {
  switch (dtype) {
    case DType::IQ4_NL:
      dequantize_iq4_nl(base, row_bytes, rows, K, out, ldo);
      return true;
    case DType::IQ4_XS:
      dequantize_iq4_xs(base, row_bytes, rows, K, out, ldo);
      return true;
    default:
      return false;
  }
}

}  // namespace ember::cpu::avx2
