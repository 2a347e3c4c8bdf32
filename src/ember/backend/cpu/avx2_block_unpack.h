// Internal AVX2 helpers shared by the per-family block-type files (avx2_matmul_legacy_quants.cpp,
// avx2_matmul_kquants.cpp, avx2_matmul_iquants.cpp): unaligned loads and the 32-value nibble
// unpack. Include only from AVX2 translation units.
#pragma once

#include <cstdint>
#include <cstring>

#include "ember/backend/cpu/avx2_util.h"

namespace ember::cpu::avx2 {

// The f16 at p (blocks need not be aligned) as f32.
EMBER_AVX2_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

EMBER_AVX2_INLINE __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// The 16 nibble bytes of a 32-value block as 32 bytes in element order: byte j holds element j in
// its low nibble and element j + 16 in its high one, so both 128-bit lanes get the 16 bytes and
// the high lane shifts right by 4 (srlv per 64-bit half: 0, 0, 4, 4) before the mask.
EMBER_AVX2_INLINE __m256i unpack_nibbles(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)),
                          _mm256_set1_epi8(0x0f));
}

}  // namespace ember::cpu::avx2
