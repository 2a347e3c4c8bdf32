// The tokens-in-lanes GEMM of avx2_matmul_token_groups.cpp (f32/f16 weights, T >= 16) on 512-bit
// vectors, for Intel CPUs: 16 tokens fill one zmm, a 12-row x 32-token tile keeps 24 accumulators,
// and each k broadcasts one f32 weight per row into two FMAs. Intel's cores issue two zmm FMAs a
// cycle where the AVX2 tile issues two ymm ones (a Xeon of the Sapphire Rapids family: 174 against
// 95 GFLOP/s a core); AMD's Zen 4 splits a zmm FMA in two, so there the AVX2 tile stays.
//
// Each output lane sums w[r][k] * x[k][token] over k in order with one FMA per k, exactly as the
// AVX2 tile's lanes do: the same bits (KernelsMatmul.FloatGemmUnderAvx512GivesTheAvx2Bits).
#include <algorithm>

#include "ember/backend/cpu/avx2_matmul_token_groups.h"
#include "ember/backend/cpu/avx512_util.h"

namespace ember::cpu::avx512 {
namespace {

using avx2::kGroupTokens;
using avx2::LinePrefetcher;

template <int R, int NG>
EMBER_AVX512_INLINE void lanes_step(const float* xg, int64_t K, int64_t k, const float* w,
                                    int64_t ldw, __m512 (&acc)[R][NG]) {
  __m512 xv[NG];
#pragma GCC unroll 2
  for (int g = 0; g < NG; ++g) xv[g] = _mm512_loadu_ps(xg + (g * K + k) * kGroupTokens);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    const __m512 wv = _mm512_set1_ps(w[r * ldw + k]);
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_fmadd_ps(wv, xv[g], acc[r][g]);
  }
}

// R panel rows (w, ldw floats apart) against NG token groups from xg ([G, K, 16]); y[t * ldy + r]
// for the groups' first `tokens` tokens.
template <int R, int NG>
EMBER_AVX512 void lanes_tile(const float* xg, int64_t K, const float* w, int64_t ldw, float* y,
                             int64_t ldy, int64_t tokens, LinePrefetcher* prefetch) {
  __m512 acc[R][NG];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    if (prefetch != nullptr) prefetch->step();
    lanes_step<R, NG>(xg, K, k, w, ldw, acc);
    lanes_step<R, NG>(xg, K, k + 1, w, ldw, acc);
    lanes_step<R, NG>(xg, K, k + 2, w, ldw, acc);
    lanes_step<R, NG>(xg, K, k + 3, w, ldw, acc);
  }
  for (; k < K; ++k) lanes_step<R, NG>(xg, K, k, w, ldw, acc);
  alignas(64) float lanes[R][kGroupTokens];
  for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r], acc[r][g]);
    store_token_lanes<R>(&lanes[0][0], std::min(kGroupTokens, tokens - g * kGroupTokens),
                         y + g * kGroupTokens * ldy, ldy);
  }
}

// Groups [g, g1) against R rows, two groups per tile while two are left.
template <int R>
EMBER_AVX512 void lanes_groups(const float* xg, int64_t T, int64_t K, const float* w, int64_t ldw,
                               float* y, int64_t ldy, int64_t g, int64_t g1,
                               LinePrefetcher* first_pass) {
  for (; g < g1; g += 2) {
    const float* xt = xg + g * K * kGroupTokens;
    float* yt = y + g * kGroupTokens * ldy;
    LinePrefetcher* pf = g != 0 ? nullptr : first_pass;
    if (g + 2 <= g1) {
      lanes_tile<R, 2>(xt, K, w, ldw, yt, ldy, T - g * kGroupTokens, pf);
    } else {
      lanes_tile<R, 1>(xt, K, w, ldw, yt, ldy, T - g * kGroupTokens, pf);
    }
  }
}

}  // namespace

bool float_gemm_uses_zmm() {
  return cpu_is_intel();
}

// avx2::panel_lanes on zmm: the same blocking (token blocks of ~256 KiB of activations, each
// row tile through every group of a block), 12-row tiles, the leftover rows one by one.
EMBER_AVX512 void panel_lanes(const float* xg, int64_t T, int64_t K, const float* w, int64_t ldw,
                              int64_t rows, float* y, int64_t ldy, const uint8_t* prefetch_limit,
                              LinePrefetcher* next_panel) {
  constexpr int R = 12;
  const int64_t groups = (T + kGroupTokens - 1) / kGroupTokens;
  const int64_t block = std::max<int64_t>(2, 256 * 1024 / (K * kGroupTokens * 4)) / 2 * 2;
  const int64_t row_bytes = ldw * static_cast<int64_t>(sizeof(float));
  const auto* wb = reinterpret_cast<const uint8_t*>(w);
  for (int64_t g0 = 0; g0 < groups; g0 += block) {
    const int64_t g1 = std::min(groups, g0 + block);
    int64_t n = 0;
    for (; n + R <= rows; n += R) {
      auto prefetch = LinePrefetcher::ahead(wb + n * row_bytes, R * row_bytes, prefetch_limit,
                                            (K + 3) / 4, /*to_l2=*/true);
      LinePrefetcher* first_pass = prefetch_limit != nullptr ? &prefetch : next_panel;
      lanes_groups<R>(xg, T, K, w + n * ldw, ldw, y + n, ldy, g0, g1, first_pass);
    }
    for (; n < rows; ++n) lanes_groups<1>(xg, T, K, w + n * ldw, ldw, y + n, ldy, g0, g1, nullptr);
  }
}

}  // namespace ember::cpu::avx512
