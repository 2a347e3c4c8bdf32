// Internal to the CPU backend's AVX2 attention (avx2_attention.cpp): reading K/V rows of every
// KV cache format (backend/kv_row_format.h) as f32, 8 values at a time in registers (load_kv8, for
// the one-token grouped kernels) or a block's rows at a time into scratch (widen_kv_rows). Every
// widening is exact. Include only from files compiled for AVX2 (functions carry EMBER_AVX2_INLINE).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/dtype.h"

namespace ember::cpu::avx2 {

// Rows [0, n) of one kv head's block (contiguous, hd halves each) into dst [n, hd_pad].
EMBER_AVX2_INLINE void widen_f16_rows(const uint16_t* src, int64_t n, int64_t hd, int64_t hd_pad,
                                      float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* s = src + i * hd;
    float* o = dst + i * hd_pad;
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      _mm256_store_ps(o + d,
                      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + d))));
    }
    for (; d < hd; ++d) o[d] = _cvtsh_ss(s[d]);
  }
}

// Row element types the grouped kernels widen in registers (a row is hd values: hd uint16_t for
// f16, hd Bf16 for bf16, hd / 32 blocks for q8_0 / q4_0; rows are `stride` elements apart).
struct Bf16 {
  uint16_t bits;
};

// The quantized row elements (a block of 32 values with one f16 scale).
template <typename Elem>
constexpr bool kQuantizedKvRow = std::is_same_v<Elem, BlockQ8_0> || std::is_same_v<Elem, BlockQ4_0>;

// A q8_0 / q4_0 block's scale in every lane: widened once per block by the grouped kernels, not
// once per 8 values.
template <typename Block>
EMBER_AVX2_INLINE __m256 kv_block_scale(const Block& b) {
  return _mm256_set1_ps(_cvtsh_ss(b.d));
}

// Values [8c, 8c + 8) of a q8_0 / q4_0 block (c = 0..3) as f32: quants times the block's scale
// (the product of an integer below 2^8 and an f16 value is exact in f32). q4_0: values 0..15 are
// the low nibbles of bytes 0..15, values 16..31 the high ones.
template <typename Block>
EMBER_AVX2_INLINE __m256 kv_block_chunk(const Block& b, __m256 scale, int c) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * c));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale);
  } else {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * (c % 2)));
    __m256i q = _mm256_cvtepu8_epi32(bytes);
    q = c < 2 ? _mm256_and_si256(q, _mm256_set1_epi32(0x0F)) : _mm256_srli_epi32(q, 4);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8))), scale);
  }
}

// 8 values of a K/V row at element d (d % 8 == 0) as f32, exactly: f32 rows as they are, f16 and
// bf16 widened, q8_0 / q4_0 as kv_block_chunk gives them.
template <typename Elem>
EMBER_AVX2_INLINE __m256 load_kv8(const Elem* row, int64_t d) {
  if constexpr (std::is_same_v<Elem, uint16_t>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
  } else if constexpr (std::is_same_v<Elem, Bf16>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (kQuantizedKvRow<Elem>) {
    const Elem& b = row[d / kQuantBlock];
    return kv_block_chunk(b, kv_block_scale(b), static_cast<int>(d % kQuantBlock / 8));
  } else {
    return _mm256_loadu_ps(row + d);
  }
}

// Rows [0, n) of one kv head's block (rows `stride` elements apart) widened into dst [n, hd_pad];
// hd % 8 == 0.
template <typename Elem>
EMBER_AVX2_INLINE void widen_rows(const Elem* src, int64_t stride, int64_t n, int64_t hd,
                                  int64_t hd_pad, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < hd; d += 8)
      _mm256_store_ps(dst + i * hd_pad + d, load_kv8(src + i * stride, d));
  }
}

// Rows [0, n) of a block in `dtype` (row_bytes apart) widened into dst [n, hd_pad].
EMBER_AVX2_INLINE void widen_kv_rows(const uint8_t* src, DType dtype, int64_t row_bytes, int64_t n,
                                     int64_t hd, int64_t hd_pad, float* dst) {
  const bool whole_groups = hd % 8 == 0 && (dtype == DType::F32 || dtype == DType::F16 ||
                                            dtype == DType::BF16 || hd % kQuantBlock == 0);
  if (!whole_groups) {
    for (int64_t i = 0; i < n; ++i) kv_read_row(src + i * row_bytes, hd, dtype, dst + i * hd_pad);
    return;
  }
  switch (dtype) {
    case DType::F16:
      return widen_f16_rows(reinterpret_cast<const uint16_t*>(src), n, hd, hd_pad, dst);
    case DType::BF16:
      return widen_rows(reinterpret_cast<const Bf16*>(src), hd, n, hd, hd_pad, dst);
    case DType::Q8_0:
      return widen_rows(reinterpret_cast<const BlockQ8_0*>(src), hd / kQuantBlock, n, hd, hd_pad,
                        dst);
    case DType::Q4_0:
      return widen_rows(reinterpret_cast<const BlockQ4_0*>(src), hd / kQuantBlock, n, hd, hd_pad,
                        dst);
    default:
      return widen_rows(reinterpret_cast<const float*>(src), hd, n, hd, hd_pad, dst);
  }
}

}  // namespace ember::cpu::avx2
