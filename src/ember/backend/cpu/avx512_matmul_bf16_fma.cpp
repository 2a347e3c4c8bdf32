// bf16 prefill (T >= 16) through f32 FMAs, for CPUs whose vdpbf16ps does half the flops a cycle of
// their FMAs: a Xeon of the Sapphire Rapids family issues one zmm vdpbf16ps every two cycles (85
// GFLOP/s a core) and two zmm FMAs a cycle (174 GFLOP/s), so the same products as f32 FMAs do twice
// the work per cycle even after widening the bf16 values. AMD's Zen 4/5 issue vdpbf16ps as fast as
// an FMA (twice its flops) and keep the dot-product tile (avx512_matmul_bf16.cpp).
//
// Input: the prepared activations of avx512_matmul_bf16.cpp ([G][P][16] bf16 pairs, tokens in
// lanes, rounded to bf16 once). Each pair widens to two f32 vectors (even and odd k) with one
// shift and one and; the weights of a 12-row tile widen once per slab of kSlabPairs pairs into an
// f32 panel [row][2 * pair] that the inner loop broadcasts from. Products of two bf16 values are
// exact in f32, so each FMA rounds once, as each half of vdpbf16ps does; per lane the order is
// fixed (pairs in order of k, the odd value before the even one, as Intel documents vdpbf16ps):
// the same bits for any T >= 16, row range or thread. Partial sums of a tile wait between slabs
// in a per-thread buffer of [G][R][16] floats.
#include <algorithm>
#include <cstring>

#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/core/aligned_vector.h"

namespace ember::cpu::avx512 {
namespace {

constexpr int64_t kGroupTokens = 16;
constexpr int64_t kSlabPairs = 256;  // 512 values of k: a 12-row panel is 24 KiB of f32

// Each 32-bit lane shifted left by 16: a bf16 value in the low half becomes its f32. (The
// zero-masked form: GCC 12's plain shift reads an "undefined" vector and warns.)
EMBER_AVX512_INLINE __m512i shift16(__m512i v) {
  return _mm512_maskz_slli_epi32(static_cast<__mmask16>(0xffff), v, 16);
}

// Rows [n, n + R) of w, pairs [j0, j0 + pairs) as f32: panel[r][2 * jj] the even value of pair
// j0 + jj, panel[r][2 * jj + 1] the odd one. K odd: the last pair's missing value is 0.
template <int R>
EMBER_AVX512 void widen_panel(const uint8_t* rows, int64_t row_bytes, int64_t K, int64_t j0,
                              int64_t pairs, float* panel) {
  for (int r = 0; r < R; ++r) {
    const uint8_t* row = rows + r * row_bytes;
    float* out = panel + r * 2 * kSlabPairs;
    const int64_t k0 = 2 * j0, n = std::min<int64_t>(2 * pairs, K - k0);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * (k0 + k)));
      _mm512_storeu_ps(out + k, _mm512_castsi512_ps(shift16(_mm512_maskz_cvtepu16_epi32(
                                    static_cast<__mmask16>(0xffff), v))));
    }
    for (; k < 2 * pairs; k += 16) {  // the slab's last values (zeros past K)
      const __m256i v =
          _mm256_maskz_loadu_epi16(static_cast<__mmask16>(lanes16(n - k)), row + 2 * (k0 + k));
      _mm512_storeu_ps(out + k, _mm512_castsi512_ps(shift16(_mm512_maskz_cvtepu16_epi32(
                                    static_cast<__mmask16>(0xffff), v))));
    }
  }
}

// acc[r][g] over pairs [0, pairs) of the slab: xg points at the slab's first pair of group 0,
// group g at xg + g * P * 16.
template <int R, int NG>
EMBER_AVX512_INLINE void slab_tile(const uint32_t* xg, int64_t P, int64_t pairs, const float* panel,
                                   __m512 (&acc)[R][NG]) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t jj = 0; jj < pairs; ++jj) {
    __m512 even[NG], odd[NG];
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
      const __m512i x = _mm512_loadu_si512(xg + g * P * kGroupTokens + jj * kGroupTokens);
      even[g] = _mm512_castsi512_ps(shift16(x));
      odd[g] = _mm512_castsi512_ps(_mm512_and_si512(x, high));
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const float* w = panel + r * 2 * kSlabPairs + 2 * jj;
      const __m512 we = _mm512_set1_ps(w[0]), wo = _mm512_set1_ps(w[1]);
#pragma GCC unroll 2
      for (int g = 0; g < NG; ++g) {
        acc[r][g] = _mm512_fmadd_ps(wo, odd[g], acc[r][g]);
        acc[r][g] = _mm512_fmadd_ps(we, even[g], acc[r][g]);
      }
    }
  }
}

// Groups [g, g + NG) of one slab: partial sums from `sums` ([G][R][16]; zeros on the first slab),
// back into it.
template <int R, int NG>
EMBER_AVX512 void slab_groups(const uint32_t* xg, int64_t P, int64_t j0, int64_t pairs,
                              const float* panel, float* sums, int64_t g0, bool first) {
  __m512 acc[R][NG];
  for (int g = 0; g < NG; ++g) {
    for (int r = 0; r < R; ++r) {
      acc[r][g] =
          first ? _mm512_setzero_ps() : _mm512_load_ps(sums + ((g0 + g) * R + r) * kGroupTokens);
    }
  }
  slab_tile<R, NG>(xg + g0 * P * kGroupTokens + j0 * kGroupTokens, P, pairs, panel, acc);
  for (int g = 0; g < NG; ++g) {
    for (int r = 0; r < R; ++r)
      _mm512_store_ps(sums + ((g0 + g) * R + r) * kGroupTokens, acc[r][g]);
  }
}

template <int R>
EMBER_AVX512 void fma_rows(const uint32_t* xg, int64_t P, int64_t T, const WeightMatrix& w,
                           float* y, int64_t ldy, int64_t n) {
  const int64_t K = w.n_cols, rb = w.row_bytes;
  const uint8_t* rows = static_cast<const uint8_t*>(w.data) + n * rb;
  const int64_t G = (T + kGroupTokens - 1) / kGroupTokens;
  thread_local AlignedVector<float> panel, sums;
  if (panel.size() < static_cast<size_t>(12 * 2 * kSlabPairs)) panel.resize(12 * 2 * kSlabPairs);
  if (sums.size() < static_cast<size_t>(G * R * kGroupTokens)) {
    sums.resize(static_cast<size_t>(G * R * kGroupTokens));
  }
  for (int64_t j0 = 0; j0 < P; j0 += kSlabPairs) {
    const int64_t pairs = std::min(kSlabPairs, P - j0);
    if (2 * j0 >= K) break;  // the pairs past K are zero padding on both sides
    widen_panel<R>(rows, rb, K, j0, pairs, panel.data());
    int64_t g = 0;
    for (; g + 2 <= G; g += 2) {
      slab_groups<R, 2>(xg, P, j0, pairs, panel.data(), sums.data(), g, j0 == 0);
    }
    if (g < G) slab_groups<R, 1>(xg, P, j0, pairs, panel.data(), sums.data(), g, j0 == 0);
  }
  for (int64_t g = 0; g < G; ++g) {
    store_token_lanes<R>(sums.data() + g * R * kGroupTokens,
                         std::min(kGroupTokens, T - g * kGroupTokens),
                         y + g * kGroupTokens * ldy + n, ldy);
  }
}

}  // namespace

bool bf16_prefill_uses_fma() {
  return cpu_is_intel();  // see the top of this file
}

EMBER_AVX512 void bf16_gemm_fma(const uint32_t* xg, int64_t P, int64_t T, const WeightMatrix& w,
                                float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  for_each_row_tile(row_begin, row_end,
                    [&]<int R>(int64_t n) { fma_rows<R>(xg, P, T, w, y, ldy, n); });
}

}  // namespace ember::cpu::avx512
