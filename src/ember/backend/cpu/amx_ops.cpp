// The AMX set's elementwise kernels on 512-bit vectors: silu_mul and gelu_mul, the bulk of the
// non-matmul time of an AMX prefill (their exponentials are compute, not memory). On the CPUs
// that have AMX (Intel Xeon, Sapphire Rapids on) a 512-bit vector op costs what a 256-bit one
// does, so 16 lanes take the time of 8; the AVX-512 set, which also runs on AMD Zen 4 (512-bit ops
// split in two halves), keeps the AVX2 ones.
//
// Bit for bit the AVX2 kernels (avx2_ops.cpp, avx2_util.h's exp): the same IEEE operations in the
// same order on each lane, so a model's results do not depend on which of the two sets ran it.
#include <cstdint>

#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kernels_isa.h"

namespace ember::cpu::amx {
namespace {

using avx512::exp16;

EMBER_AVX512_INLINE __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

EMBER_AVX512_INLINE __m512 gelu16(__m512 g) {
  const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
  const __m512 u = _mm512_mul_ps(_mm512_set1_ps(-2.0f * 0.7978845608028654f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(u)));
}

}  // namespace

EMBER_AVX512 void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = avx512::lanes16(n - i);
    _mm512_mask_storeu_ps(
        out + i, m,
        silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

EMBER_AVX512 void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = avx512::lanes16(n - i);
    __m512 r = gelu16(_mm512_maskz_loadu_ps(m, gate + i));
    if (up != nullptr) r = _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, up + i));
    _mm512_mask_storeu_ps(out + i, m, r);
  }
}

}  // namespace ember::cpu::amx
