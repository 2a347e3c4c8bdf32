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

// avx2::exp on 16 lanes: x = n ln2 + r, exp(r) by its degree-7 Taylor polynomial, times 2^n;
// 0 below -87.34 (and for NaN), inf above 88.72.
EMBER_AVX512_INLINE __m512 exp16(__m512 x) {
  // (Zero-masked forms with every lane: GCC 12's plain ones read an "undefined" vector and warn.)
  constexpr auto all = static_cast<__mmask16>(0xffff);
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __m512 hi = _mm512_set1_ps(88.72283f);
  const __m512 xc = _mm512_maskz_min_ps(all, _mm512_maskz_max_ps(all, x, lo), hi);
  const __m512 n = _mm512_maskz_min_ps(
      all,
      _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm512_set1_ps(127.0f));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_maskz_slli_epi32(
      all, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(all, n), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);  // underflow, NaN -> 0
  const __mmask16 overflow = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(in_range, y), overflow,
                            _mm512_set1_ps(__builtin_inff()));
}

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
