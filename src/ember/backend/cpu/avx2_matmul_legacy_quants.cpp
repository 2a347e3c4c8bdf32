// AVX2 row dots and panel dequantizers of the q4_1, q5_0, q5_1, q8_1 weights (quant_row_dot.h).
//
// Row dots: per 32-block an integer dot product of the weight quants with the activation's int8
// qs (maddubs + madd: 8 int32 lanes whose sum is exact), converted to float and accumulated with
// d_w * d_x by one FMA. Offsets and mins never touch the quants; they come out through the
// activation block's sum(q) (BlockQ8Act::sum):
//   q5_0:       sum_i (u_i - 16) q_i = sum_i u_i q_i - 16 sum(q)             (integer, lane 0)
//   q4_1, q5_1: sum_i (d u_i + m) d_x q_i = d d_x sum_i u_i q_i + m d_x sum(q) (a scalar FMA)
// The unsigned u (< 32) feed maddubs directly (31 * 127 * 2 < 2^15: the int16 pair sums cannot
// saturate); q8_1's signed quants use the sign trick (see signed_dot).
//
// Panel dequantizers: the values of core/dequantize.cpp bit for bit. d is an f16 (11 significant
// bits) and |q| <= 128, so d * q is exact in f32 and equals the scalar product; q4_1 / q5_1 then
// add m in one rounding (an FMA would round the same exact product the same way, so contraction
// cannot change the bits either).
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "ember/backend/cpu/avx2_block_unpack.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/quant_blocks.h"

namespace ember::cpu::avx2 {
namespace {

// The fifth bits (bit j of the little-endian uint32 qh) as 0x10 in byte j. Every 32-bit lane gets
// qh; the shuffle gives byte j a copy of qh byte j / 8 (each 128-bit lane shuffles its own copy),
// the AND keeps bit j % 8 (mask bytes 1, 2, 4, ..., 128 repeating), and cmpeq turns a kept bit
// into 0xff, narrowed to 0x10.
EMBER_AVX2_INLINE __m256i fifth_bits(const uint8_t* qh) {
  int32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(bits), _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                  0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// sum_i u_i q_i as 8 int32 lanes, u unsigned bytes <= 128 and |q| <= 127 (2 * 128 * 127 < 2^15:
// maddubs's int16 pair sums cannot saturate).
EMBER_AVX2_INLINE __m256i unsigned_dot(__m256i u, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

// sum_i w_i q_i for signed w: maddubs takes |w| (unsigned) times q carrying w's sign (sign_epi8
// negates q where w < 0 and zeroes it where w == 0). q8_1's -128 becomes |w| = 0x80, which
// maddubs reads as the unsigned 128.
EMBER_AVX2_INLINE __m256i signed_dot(__m256i w, __m256i q) {
  return unsigned_dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

static_assert(offsetof(BlockQ4_1, m) == offsetof(BlockQ5_1, m));

// q4_1 / q5_1 (value d u + m, u the unsigned quants): acc += d_w d_x * (lanes of sum u q);
// *mins += m d_x sum(q).
EMBER_AVX2_INLINE void accumulate_with_min(__m256i u, const uint8_t* b, const BlockQ8Act& x,
                                           __m256* acc, float* mins) {
  const __m256 lanes = _mm256_cvtepi32_ps(unsigned_dot(u, load32(x.qs)));
  *acc = _mm256_fmadd_ps(lanes, _mm256_set1_ps(half_at(b) * x.d), *acc);
  *mins += half_at(b + offsetof(BlockQ4_1, m)) * x.d * static_cast<float>(x.sum);
}

// One block type each: kBytes per 32 values; accumulate() adds the block's dot with activation
// block x to acc (and its min term to *mins); quants() (not q8_1) gives the 32 stored quants.
struct Q4_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_1);
  static EMBER_AVX2_INLINE __m256i quants(const uint8_t* b) {
    return unpack_nibbles(b + offsetof(BlockQ4_1, qs));
  }
  static EMBER_AVX2_INLINE void accumulate(const uint8_t* b, const BlockQ8Act& x, __m256* acc,
                                           float* mins) {
    accumulate_with_min(quants(b), b, x, acc, mins);
  }
};

struct Q5_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_1);
  static EMBER_AVX2_INLINE __m256i quants(const uint8_t* b) {
    return _mm256_or_si256(unpack_nibbles(b + offsetof(BlockQ5_1, qs)),
                           fifth_bits(b + offsetof(BlockQ5_1, qh)));
  }
  static EMBER_AVX2_INLINE void accumulate(const uint8_t* b, const BlockQ8Act& x, __m256* acc,
                                           float* mins) {
    accumulate_with_min(quants(b), b, x, acc, mins);
  }
};

struct Q5_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ5_0);
  // u = nibble | fifth bit << 4, unsigned (the value is u - 16).
  static EMBER_AVX2_INLINE __m256i quants(const uint8_t* b) {
    return _mm256_or_si256(unpack_nibbles(b + offsetof(BlockQ5_0, qs)),
                           fifth_bits(b + offsetof(BlockQ5_0, qh)));
  }
  static EMBER_AVX2_INLINE void accumulate(const uint8_t* b, const BlockQ8Act& x, __m256* acc,
                                           float* /*mins*/) {
    // The lanes sum to sum u q; 16 sum(q) comes off lane 0.
    const __m256i offset = _mm256_zextsi128_si256(_mm_cvtsi32_si128(16 * x.sum));
    const __m256i dot = _mm256_sub_epi32(unsigned_dot(quants(b), load32(x.qs)), offset);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_at(b) * x.d), *acc);
  }
};

struct Q8_1 {
  static constexpr int64_t kBytes = sizeof(BlockQ8_1);
  static EMBER_AVX2_INLINE void accumulate(const uint8_t* b, const BlockQ8Act& x, __m256* acc,
                                           float* /*mins*/) {
    const __m256i dot = signed_dot(load32(b + offsetof(BlockQ8_1, qs)), load32(x.qs));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_at(b) * x.d), *acc);
  }
};

// Decode streams the matrix row after row, but a row is a stream of a few hundred bytes, too short
// for the hardware prefetcher to run ahead of: every iteration asks for the line kPrefetchAhead
// bytes on, in a row a later call reads (the Rows layout is contiguous; a prefetch never faults,
// so running past the matrix is harmless). Measured single-threaded on a 4096 x 14336 matrix (from
// DRAM): q4_1 / q8_1 +10-25%; on the 576 x 1536 ones (cache-resident) within noise. 4 KiB beat
// 1, 2 and 8 KiB.
constexpr int64_t kPrefetchAhead = 4096;

// Blocks two at a time into two accumulators (one FMA chain per block would bound the loop).
template <class Type>
EMBER_AVX2 float row_dot(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  const int64_t nb = K / kQuantBlock;
  constexpr int64_t kBytes = Type::kBytes;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float mins0 = 0.0f, mins1 = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* p = row + b * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchAhead, _MM_HINT_T0);
    Type::accumulate(p, x[b], &acc0, &mins0);
    Type::accumulate(p + kBytes, x[b + 1], &acc1, &mins1);
  }
  if (b < nb) Type::accumulate(row + b * kBytes, x[b], &acc0, &mins0);
  return hsum(_mm256_add_ps(acc0, acc1)) + (mins0 + mins1);
}

// --- Panel dequantizers ----------------------------------------------------------------------

// 32 bytes in element order as 4 x 8 floats, the bytes signed or unsigned.
template <bool kSigned>
EMBER_AVX2_INLINE void bytes_to_floats(__m256i v, __m256 out[4]) {
  const __m128i halves[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
  for (int h = 0; h < 2; ++h) {
    const __m128i lo = halves[h], hi = _mm_srli_si128(halves[h], 8);
    out[2 * h] = _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(lo) : _mm256_cvtepu8_epi32(lo));
    out[2 * h + 1] =
        _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi));
  }
}

// d * q (q5_0: q = u - 16 as signed bytes; q8_1: its int8 quants).
template <class Type>
EMBER_AVX2_INLINE void dequantize_scaled(const uint8_t* b, float* y) {
  __m256i q;
  if constexpr (std::is_same_v<Type, Q5_0>) {
    q = _mm256_sub_epi8(Q5_0::quants(b), _mm256_set1_epi8(16));
  } else {
    q = load32(b + offsetof(BlockQ8_1, qs));
  }
  __m256 v[4];
  bytes_to_floats<true>(q, v);
  const __m256 d = _mm256_set1_ps(half_at(b));
  for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y + 8 * c, _mm256_mul_ps(d, v[c]));
}

// d * u + m (q4_1, q5_1): the product exact, then one rounding for the add.
template <class Type>
EMBER_AVX2_INLINE void dequantize_with_min(const uint8_t* b, float* y) {
  __m256 v[4];
  bytes_to_floats<false>(Type::quants(b), v);
  const __m256 d = _mm256_set1_ps(half_at(b));
  const __m256 m = _mm256_set1_ps(half_at(b + offsetof(BlockQ4_1, m)));
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(y + 8 * c, _mm256_add_ps(_mm256_mul_ps(d, v[c]), m));
  }
}

template <class Type>
EMBER_AVX2 void dequantize(const uint8_t* base, int64_t row_bytes, int64_t rows, int64_t K,
                           float* out, int64_t ldo) {
  const int64_t nb = K / kQuantBlock;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = base + i * row_bytes;
    float* y = out + i * ldo;
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (std::is_same_v<Type, Q4_1> || std::is_same_v<Type, Q5_1>) {
        dequantize_with_min<Type>(row + b * Type::kBytes, y + b * kQuantBlock);
      } else {
        dequantize_scaled<Type>(row + b * Type::kBytes, y + b * kQuantBlock);
      }
    }
  }
}

}  // namespace

QuantRowDot legacy_quant_row_dot(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
      return row_dot<Q4_1>;
    case DType::Q5_0:
      return row_dot<Q5_0>;
    case DType::Q5_1:
      return row_dot<Q5_1>;
    case DType::Q8_1:
      return row_dot<Q8_1>;
    default:
      return nullptr;
  }
}

bool legacy_dequantize_rows(DType dtype, const uint8_t* base, int64_t row_bytes, int64_t rows,
                            int64_t K, float* out, int64_t ldo) {
  switch (dtype) {
    case DType::Q4_1:
      dequantize<Q4_1>(base, row_bytes, rows, K, out, ldo);
      return true;
    case DType::Q5_0:
      dequantize<Q5_0>(base, row_bytes, rows, K, out, ldo);
      return true;
    case DType::Q5_1:
      dequantize<Q5_1>(base, row_bytes, rows, K, out, ldo);
      return true;
    case DType::Q8_1:
      dequantize<Q8_1>(base, row_bytes, rows, K, out, ldo);
      return true;
    default:
      return false;
  }
}

}  // namespace ember::cpu::avx2
