// AVX2 GEMM for float weights and T >= 16 tokens, with the tokens in the SIMD lanes.
//
// The dot-product tiles of avx2_matmul.cpp keep k in the lanes and need one horizontal sum per
// output. With 8 tokens per vector and a weight broadcast from the (f32) panel, a 6-row x 16-token
// tile does 12 FMAs per 8 loads with no reduction at the end. One thread, SmolLM2 shapes, the whole
// matmul (panel conversion included), median of 7 alternating runs: f32 K=576 N=1536 T=32 51 -> 72
// GFLOP/s, bf16 65 -> 70; at T=128 bf16 66 -> 82 (peak FMA rate ~97). The 6x16 tile in assembly
// (below) then took f32 T=32 from 67-75 to 74-82 GFLOP/s and bf16 from 62-70 to 65-73 (3
// alternating runs of BM_Matmul).
#include "ember/backend/cpu/avx2_matmul_token_groups.h"

#include <algorithm>

#include "ember/backend/cpu/avx2_prefetch.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/avx512_panel_lanes.h"
#include "ember/backend/cpu/kernels.h"

namespace ember::cpu::avx2 {
namespace {

EMBER_AVX2_INLINE void transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// One k of a tile: acc[r][v] += w[r, k] * x[k, the 8 tokens of v].
template <int R, int NV>
EMBER_AVX2_INLINE void lanes_step(const float* xg, int64_t k, const float* w, int64_t ldw,
                                  __m256 (&acc)[R][NV]) {
  __m256 xv[NV];
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) xv[v] = _mm256_loadu_ps(xg + k * kGroupTokens + 8 * v);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256 wv = _mm256_broadcast_ss(w + r * ldw + k);
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(wv, xv[v], acc[r][v]);
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
// Four k of the 6-row x 16-token tile in assembly. GCC 12 compiles the intrinsics version with two
// accumulator spills per four k (12 accumulators + 2 activation vectors + 1 broadcast leave one
// spare register, and its scheduler wants more) and one pointer increment per weight row. Here the
// 12 accumulators stay in ymm0-11 (the "+x" operands; ymm12-15 are the scratch), the six rows are
// addressed from two bases (rows 0-2 at w + {0, 1, 2} * ld, rows 3-5 at w3 + {0, 1, 2} * ld) and
// every output still does acc = w[r, k] * x[k, t] + acc for k = 0, 1, ..: bit-identical to
// lanes_step.
// clang-format off
#define EMBER_LANES_ROW(j, base, index, a0, a1, wreg)               \
  "vbroadcastss " #j "*4(%[" base "]" index "), %%" wreg "\n\t"    \
  "vfmadd231ps %%ymm12, %%" wreg ", %[" a0 "]\n\t"                 \
  "vfmadd231ps %%ymm13, %%" wreg ", %[" a1 "]\n\t"
#define EMBER_LANES_K(j)                                        \
  "vmovups " #j "*64(%[x]), %%ymm12\n\t"                       \
  "vmovups " #j "*64+32(%[x]), %%ymm13\n\t"                    \
  EMBER_LANES_ROW(j, "w", "", "a00", "a01", "ymm14")            \
  EMBER_LANES_ROW(j, "w", ",%[ld]", "a10", "a11", "ymm15")      \
  EMBER_LANES_ROW(j, "w", ",%[ld],2", "a20", "a21", "ymm14")    \
  EMBER_LANES_ROW(j, "w3", "", "a30", "a31", "ymm15")           \
  EMBER_LANES_ROW(j, "w3", ",%[ld]", "a40", "a41", "ymm14")     \
  EMBER_LANES_ROW(j, "w3", ",%[ld],2", "a50", "a51", "ymm15")
// clang-format on

EMBER_AVX2 void tile_lanes_6x2(const float* xg, int64_t K, const float* w, int64_t ldw, float* y,
                               int64_t ldy, int64_t n_tokens, LinePrefetcher* prefetch) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float* x = xg;
  const float* w0 = w;
  const float* w3 = w + 3 * ldw;
  const int64_t ld = ldw * static_cast<int64_t>(sizeof(float));
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    if (prefetch != nullptr) prefetch->step();
    // (GCC allows 30 operands, an in-out one counting twice: the pointers advance outside.)
    asm(EMBER_LANES_K(0) EMBER_LANES_K(1) EMBER_LANES_K(2) EMBER_LANES_K(3)
        : [a00] "+x"(a00), [a01] "+x"(a01), [a10] "+x"(a10), [a11] "+x"(a11), [a20] "+x"(a20),
          [a21] "+x"(a21), [a30] "+x"(a30), [a31] "+x"(a31), [a40] "+x"(a40), [a41] "+x"(a41),
          [a50] "+x"(a50), [a51] "+x"(a51)
        : [x] "r"(x), [w] "r"(w0), [w3] "r"(w3), [ld] "r"(ld)
        : "xmm12", "xmm13", "xmm14", "xmm15", "memory");
    x += 4 * kGroupTokens;
    w0 += 4;
    w3 += 4;
  }
  __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
  for (; k < K; ++k) lanes_step<6, 2>(xg, k, w, ldw, acc);
  alignas(32) float lanes[6][16];
#pragma GCC unroll 8
  for (int r = 0; r < 6; ++r) {
    _mm256_store_ps(&lanes[r][0], acc[r][0]);
    _mm256_store_ps(&lanes[r][8], acc[r][1]);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < 6; ++r) y[t * ldy + r] = lanes[r][t];
  }
}
#undef EMBER_LANES_K
#undef EMBER_LANES_ROW
#define EMBER_HAVE_LANES_6X2_ASM 1
#endif

// y[t, r] for R f32 weight rows (ldw floats apart) x the NV * 8 tokens of one group (xg: [K, 16]);
// n_tokens (<= NV * 8) of them are stored. Each output sums k = 0, 1, .. K - 1 in that order in one
// lane, whatever the tile: results are bit-identical for every T >= 16, row range and thread.
template <int R, int NV>
EMBER_AVX2 void tile_lanes(const float* xg, int64_t K, const float* w, int64_t ldw, float* y,
                           int64_t ldy, int64_t n_tokens, LinePrefetcher* prefetch) {
  __m256 acc[R][NV];
  zero_accumulators(acc);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    if (prefetch != nullptr) prefetch->step();
    lanes_step<R, NV>(xg, k, w, ldw, acc);
    lanes_step<R, NV>(xg, k + 1, w, ldw, acc);
    lanes_step<R, NV>(xg, k + 2, w, ldw, acc);
    lanes_step<R, NV>(xg, k + 3, w, ldw, acc);
  }
  for (; k < K; ++k) lanes_step<R, NV>(xg, k, w, ldw, acc);
  alignas(32) float lanes[R][NV * 8];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_store_ps(&lanes[r][8 * v], acc[r][v]);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < R; ++r) y[t * ldy + r] = lanes[r][t];
  }
}

template <int R>
EMBER_AVX2_INLINE void tile_lanes_group(const float* xg, int64_t K, const float* w, int64_t ldw,
                                        float* y, int64_t ldy, int64_t n_tokens,
                                        LinePrefetcher* prefetch) {
  if (n_tokens > 8) {
#ifdef EMBER_HAVE_LANES_6X2_ASM
    if constexpr (R == 6) {
      tile_lanes_6x2(xg, K, w, ldw, y, ldy, n_tokens, prefetch);
      return;
    }
#endif
    tile_lanes<R, 2>(xg, K, w, ldw, y, ldy, n_tokens, prefetch);
  } else {
    tile_lanes<R, 1>(xg, K, w, ldw, y, ldy, n_tokens, prefetch);
  }
}

}  // namespace

// Tokens [token_begin, token_end) (rows of x, ldx apart, the first at x) into xg [G, K, 16],
// G = ceil(T / 16): group g holds tokens 16g .. 16g + 15 side by side for every k, zeros for tokens
// past T. token_begin is a multiple of 8.
EMBER_AVX2 void group_tokens(const float* x, int64_t ldx, int64_t token_begin, int64_t token_end,
                             int64_t K, float* xg) {
  for (int64_t t0 = token_begin; t0 < token_end; t0 += 8) {
    float* out = xg + (t0 / kGroupTokens) * K * kGroupTokens + t0 % kGroupTokens;
    const int64_t n = std::min<int64_t>(8, token_end - t0);
    const float* rows = x + (t0 - token_begin) * ldx;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      __m256 r[8];
      for (int64_t i = 0; i < 8; ++i) {
        r[i] = i < n ? _mm256_loadu_ps(rows + i * ldx + k) : _mm256_setzero_ps();
      }
      transpose8x8(r);
      for (int64_t j = 0; j < 8; ++j) _mm256_storeu_ps(out + (k + j) * kGroupTokens, r[j]);
    }
    for (; k < K; ++k) {
      for (int64_t i = 0; i < 8; ++i) out[k * kGroupTokens + i] = i < n ? rows[i * ldx + k] : 0;
    }
  }
  // A last group of 8 or fewer tokens: its upper half is never read (the 8-token tile runs there).
}

// Rows [0, rows) of one f32 panel (row i at w + i * ldw, K values) against all T grouped tokens.
// Token blocks keep the activations in use within ~256 KiB of L2; the panel stays in L2 across
// blocks and each 6-row tile (<= 37 KiB) near L1 while the groups of a block pass it. f32 weights
// come straight from memory on their first pass: `next` prefetches the following rows then.
EMBER_AVX2 void panel_lanes(const float* xg, int64_t T, int64_t K, const float* w, int64_t ldw,
                            int64_t rows, float* y, int64_t ldy, const uint8_t* prefetch_limit,
                            LinePrefetcher* next_panel) {
  if (lanes_on_zmm()) {
    return avx512::panel_lanes(xg, T, K, w, ldw, rows, y, ldy, prefetch_limit, next_panel);
  }
  constexpr int R = kLanesTileRows;
  const int64_t groups = (T + kGroupTokens - 1) / kGroupTokens;
  const int64_t block = std::max<int64_t>(1, 256 * 1024 / (K * kGroupTokens * 4));
  const int64_t row_bytes = ldw * static_cast<int64_t>(sizeof(float));
  const auto* wb = reinterpret_cast<const uint8_t*>(w);
  for (int64_t g0 = 0; g0 < groups; g0 += block) {
    const int64_t g1 = std::min(groups, g0 + block);
    int64_t n = 0;
    for (; n < rows; n += R) {
      const bool full = n + R <= rows;
      auto prefetch = LinePrefetcher::ahead(wb + n * row_bytes, R * row_bytes, prefetch_limit,
                                            (K + 3) / 4, /*to_l2=*/true);
      for (int64_t g = g0; g < g1; ++g) {
        const float* xt = xg + g * K * kGroupTokens;
        const int64_t n_tokens = std::min(kGroupTokens, T - g * kGroupTokens);
        float* yt = y + g * kGroupTokens * ldy + n;
        LinePrefetcher* pf = g != 0 ? nullptr : prefetch_limit != nullptr ? &prefetch : next_panel;
        if (full) {
          tile_lanes_group<R>(xt, K, w + n * ldw, ldw, yt, ldy, n_tokens, pf);
        } else {
          for (int64_t i = n; i < rows; ++i) {
            tile_lanes_group<1>(xt, K, w + i * ldw, ldw, yt + (i - n), ldy, n_tokens, nullptr);
          }
        }
      }
    }
  }
}

bool lanes_on_zmm() {
  const Isa isa = active_isa();
  return (isa == Isa::Avx512 || isa == Isa::Amx) && avx512::float_gemm_uses_zmm();
}

int64_t lanes_tile_rows() {
  return lanes_on_zmm() ? 12 : kLanesTileRows;
}

}  // namespace ember::cpu::avx2
