// Internal AVX-512 helpers shared by the avx512_*.cpp kernels. Like the AVX2 code, every function
// carries its target attribute, so the build needs no -march flag; the dispatcher only reaches
// this code after CPUID reports every feature in EMBER_AVX512 (cpu_has_avx512 in kernels.cpp).
// The target is a superset of the AVX2 one, so the avx2 helpers inline here.
#pragma once

#include <immintrin.h>

#include <cstdint>

#define EMBER_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,avx2,fma,f16c"
#define EMBER_AVX512 __attribute__((target(EMBER_AVX512_TARGET)))
#define EMBER_AVX512_INLINE __attribute__((target(EMBER_AVX512_TARGET), always_inline)) inline
// A lambda inside an EMBER_AVX512 function does not inherit its target (as EMBER_AVX2_LAMBDA).
#define EMBER_AVX512_LAMBDA __attribute__((target(EMBER_AVX512_TARGET)))

namespace ember::cpu::avx512 {

// (Zero-masked extracts: GCC 12's plain extracts, its 512 -> 256 cast and _mm512_reduce_add_ps read
// an "undefined" vector and warn.)
EMBER_AVX512_INLINE __m256 add_halves(__m512 v) {
  const auto all = static_cast<__mmask8>(0xff);
  return _mm256_add_ps(_mm512_maskz_extractf32x8_ps(all, v, 0),
                       _mm512_maskz_extractf32x8_ps(all, v, 1));
}

// The sum of the 16 lanes in one fixed order (halves, quarters, then pairs), so a kernel that
// reduces through it gets the same bits for the same accumulator.
EMBER_AVX512_INLINE float reduce_add(__m512 v) {
  const __m256 h = add_halves(v);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Mask of the first n lanes (none for n <= 0, all 16 for n >= 16).
EMBER_AVX512_INLINE __mmask16 lanes16(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// Mask of the first n 16-bit elements (none for n <= 0, all 32 for n >= 32).
EMBER_AVX512_INLINE __mmask32 lanes32(int64_t n) {
  if (n <= 0) return 0;
  return n >= 32 ? static_cast<__mmask32>(0xffffffffu) : static_cast<__mmask32>((1u << n) - 1u);
}

// 16 x 16 32-bit transpose in registers: r[i] lane j becomes r[j] lane i.
EMBER_AVX512_INLINE void transpose16(__m512i r[16]) {
  const auto all16 = static_cast<__mmask16>(0xffff);
  const auto all8 = static_cast<__mmask8>(0xff);
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(all16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all16, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(all8, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(all8, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(all8, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(all8, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_maskz_shuffle_i32x4(all16, r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_maskz_shuffle_i32x4(all16, r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_i32x4(all16, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_i32x4(all16, t[i], t[i + 8], 0xdd);
  }
}

// avx2::exp on 16 lanes, bit for bit (the same IEEE operations on each lane): x = n ln2 + r, exp(r)
// by its degree-7 Taylor polynomial, times 2^n; 0 below -87.34 (and for NaN), inf above 88.72.
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
  // p * 2^n in one vscalefps: n is an integer in [-126, 127], so 2^n is the normal float that
  // avx2::exp builds from its exponent bits, and both round the one product the same way.
  const __m512 y = _mm512_maskz_scalef_ps(all, p, n);
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);  // underflow, NaN -> 0
  const __mmask16 overflow = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(in_range, y), overflow,
                            _mm512_set1_ps(__builtin_inff()));
}

// Whether the decode kernels, which read each weight row once in address order, prefetch that
// stream kDecodePrefetchBytes ahead into L2. AMD Zen 4 reached 90-97% of the read-bandwidth probe
// without it and lost with it (60-85%); Intel's cores keep fewer lines in flight from their
// hardware prefetchers alone, and there it is what reaches the memory's bandwidth. Xeon (Sapphire
// Rapids family, 2 cores of a VM, 2 threads summing 2 GiB in 2 MiB pages): 15-17 GB/s without,
// 25-28 GB/s with it (distances of 1-16 KiB tried: 4 KiB and more best).
inline constexpr int64_t kDecodePrefetchBytes = 4096;

inline bool cpu_is_intel() {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
}

inline bool decode_stream_prefetch() {
  return cpu_is_intel();
}

// A tile's sums for R rows x 16 tokens in lanes (lanes[r * 16 + i]: row r, token i) into y[i * ldy
// + r] for the first n tokens. Each token's R outputs are adjacent in y: gathered from the lanes
// and written by one masked store. R scalar stores per token cost a third of the time on wide
// matrices, whose token rows in y are a multiple of 4 KiB apart and share one L1 set (one thread,
// 128 tokens, K 2,304 x N 9,216: 257 -> 380 GFLOP/s; K 576 x N 1,536: 230 -> 360).
template <int R>
EMBER_AVX512_INLINE void store_token_lanes(const float* lanes, int64_t n, float* y, int64_t ldy) {
  const __m512i column =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(16));
  const __mmask16 row_mask = lanes16(R);
  for (int64_t i = 0; i < n; ++i) {
    const __m512 v = _mm512_mask_i32gather_ps(
        _mm512_setzero_ps(), row_mask, _mm512_add_epi32(column, _mm512_set1_epi32(i)), lanes, 4);
    _mm512_mask_storeu_ps(y + i * ldy, row_mask, v);
  }
}

// Rows [begin, end) in tiles of 12 rows, the rest in tiles of 8, 4, 2 and 1: calls
// tile.template operator()<R>(n) for the tile of R rows from row n.
template <typename Tile>
EMBER_AVX512_INLINE void for_each_row_tile(int64_t begin, int64_t end, Tile&& tile) {
  int64_t n = begin;
  for (; n + 12 <= end; n += 12) tile.template operator()<12>(n);
  for (; n + 8 <= end; n += 8) tile.template operator()<8>(n);
  for (; n + 4 <= end; n += 4) tile.template operator()<4>(n);
  for (; n + 2 <= end; n += 2) tile.template operator()<2>(n);
  for (; n < end; ++n) tile.template operator()<1>(n);
}

}  // namespace ember::cpu::avx512
