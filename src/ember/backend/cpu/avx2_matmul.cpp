// AVX2 matmul y[t, n] = sum_k x[t, k] * W[n, k] for float weights (f32, f16, bf16), and for
// quantized weights (q8_0, q4_0) in the Rows layout from kGemmMinTokens tokens on: their panels are
// dequantized to f32 and run the float GEMM. Otherwise quantized weights take 8-bit activations
// (matmul_q8, avx2_matmul_q8.cpp and avx2_matmul_interleaved.cpp).
//
// Work is cut into tiles of R weight rows x NT tokens. In a tile each weight chunk is loaded (and
// converted to f32) once and used for NT tokens, and each activation chunk once for R rows.
//
// bf16 rows are read 16 values (32 bytes) at a time: as 8 32-bit lanes, lane j holds value 2j in
// its low half and value 2j + 1 in its high half, so `lane << 16` is the even values and
// `lane & 0xffff0000` the odd ones as exact f32, two ALU ops per 16 values instead of a widening
// shuffle per 8. The activations are de-interleaved to match once per call (x_even, x_odd per
// 16-value chunk, zero-padded to a multiple of 16).
//
// Determinism: every output element has ONE accumulator that takes its FMAs in a fixed order
// (increasing k; for bf16 even then odd chunk per 16 values) and is reduced by store_lane_sums();
// the tile shape only decides which elements run side by side. So y[t, n] is bit-identical for any
// T < 16, row range or thread. From T = 16 on the tokens-in-lanes GEMM
// (avx2_matmul_token_groups.cpp) runs instead: one accumulator lane per output summing k in order,
// bit-identical for any T >= 16; the two differ by float reassociation only.
#include <algorithm>
#include <vector>

#include "ember/backend/cpu/avx2_matmul_token_groups.h"
#include "ember/backend/cpu/avx2_prefetch.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/aligned_vector.h"

namespace ember::cpu::avx2 {
namespace {

static_assert(kGroupTokens == kGemmMinTokens, "the token-group GEMM is the kGemmMinTokens path");

// --- f32 / f16: chunks of 8 along k, the last one zero-padded -------------------------------

template <DType kDtype>
EMBER_AVX2_INLINE __m256 load8(const uint8_t* row, int64_t k) {
  if constexpr (kDtype == DType::F32) return load8_f32(row, k);
  return load8_f16(row, k);
}

// x: NT tokens starting at x (leading dim ldx); w: R rows (row_bytes apart); y[t * ldy + r].
// `prefetch`, when given, pulls weights a few KiB ahead into cache while this tile computes.
template <DType kDtype, int R, int NT>
EMBER_AVX2 void tile_f32_f16(const float* x, int64_t ldx, int64_t K, const uint8_t* w,
                             int64_t row_bytes, float* y, int64_t ldy, LinePrefetcher* prefetch) {
  __m256 acc[R][NT];
  zero_accumulators(acc);
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if (prefetch != nullptr) prefetch->step();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8<kDtype>(w + r * row_bytes, k);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * ldx + k), acc[r][t]);
      }
    }
  }
  if (k < K) {  // zero-padded tail: the padding lanes add 0 * 0
    const __m256i mask = tail_mask(K - k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load_tail(kDtype, w + r * row_bytes, k, K - k);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + t * ldx + k, mask), acc[r][t]);
      }
    }
  }
  store_lane_sums<R, NT>(acc, y, ldy);
}

// --- bf16: chunks of 16 against de-interleaved activations ------------------------------------

// Floats per token of the prepared activations: bf16 pads K to whole chunks of 16.
int64_t prepared_stride(DType dtype, int64_t K) {
  return dtype == DType::BF16 ? (K + 15) / 16 * 16 : K;
}

// x [T, K] -> xp [T, K16] with K16 = K rounded up to 16: per chunk of 16, the 8 even-indexed
// values then the 8 odd-indexed ones, zeros past K.
EMBER_AVX2 void deinterleave_activations(const float* x, int64_t T, int64_t K, float* xp) {
  const int64_t K16 = (K + 15) / 16 * 16;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * K;
    float* out = xp + t * K16;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      // a = x0..x7, b = x8..x15 -> even (x0 x2 .. x14), odd (x1 x3 .. x15).
      const __m256 a = _mm256_loadu_ps(xt + k), b = _mm256_loadu_ps(xt + k + 8);
      const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
      const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // per 128-bit lane
      const __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      _mm256_storeu_ps(out + k, _mm256_permutevar8x32_ps(even, order));
      _mm256_storeu_ps(out + k + 8, _mm256_permutevar8x32_ps(odd, order));
    }
    if (k < K) {
      for (int64_t j = 0; j < 16; ++j) {
        const float v = k + j < K ? xt[k + j] : 0.0f;
        out[k + (j % 2) * 8 + j / 2] = v;
      }
    }
  }
}

// 16 bf16 values (one 32-byte vector) as even / odd f32.
EMBER_AVX2_INLINE void split_bf16(__m256i v, __m256* even, __m256* odd) {
  *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000))));
}

EMBER_AVX2_INLINE __m256i load16_bf16_full(const uint8_t* row, int64_t k) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
}

// The last, partial chunk of 16 (k + 16 > K), zero-padded. Kept out of the main loops: merged into
// them, GCC routed every load through the stack buffer.
EMBER_AVX2_INLINE __m256i load16_bf16_tail(const uint8_t* row, int64_t k, int64_t K) {
  alignas(32) uint16_t buf[16] = {};
  std::memcpy(buf, row + 2 * k, static_cast<size_t>(K - k) * 2);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
}

// The 16 bf16 values at element k of a row (the last chunk zero-padded) as even / odd f32.
EMBER_AVX2_INLINE void load16_bf16(const uint8_t* row, int64_t k, int64_t K, __m256* even,
                                   __m256* odd) {
  split_bf16(k + 16 <= K ? load16_bf16_full(row, k) : load16_bf16_tail(row, k, K), even, odd);
}

// One chunk of 16 along k for an R x NT tile: acc[r][t] += even_r * x_even_t, then odd_r * x_odd_t
// (that order is part of the determinism contract). Row-outer so that only one row's even/odd
// pair is live next to the R * NT accumulators: token-outer needed 2R more registers and spilled
// the accumulators of the 3 x 4 and 4 x 3 tiles to the stack on every iteration.
template <int R, int NT, bool kTail>
EMBER_AVX2_INLINE void bf16_chunk(const float* xp, int64_t ldx, const uint8_t* w, int64_t row_bytes,
                                  int64_t k, int64_t K, __m256 (&acc)[R][NT]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256 even, odd;
    split_bf16(
        kTail ? load16_bf16_tail(w + r * row_bytes, k, K) : load16_bf16_full(w + r * row_bytes, k),
        &even, &odd);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      acc[r][t] = _mm256_fmadd_ps(even, _mm256_loadu_ps(xp + t * ldx + k), acc[r][t]);
      acc[r][t] = _mm256_fmadd_ps(odd, _mm256_loadu_ps(xp + t * ldx + k + 8), acc[r][t]);
    }
  }
}

// xp: de-interleaved activations, NT tokens with leading dim ldx (= K16).
template <int R, int NT>
EMBER_AVX2 void tile_bf16(const float* xp, int64_t ldx, int64_t K, const uint8_t* w,
                          int64_t row_bytes, float* y, int64_t ldy, LinePrefetcher* prefetch) {
  __m256 acc[R][NT];
  zero_accumulators(acc);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if (prefetch != nullptr) prefetch->step();
    bf16_chunk<R, NT, false>(xp, ldx, w, row_bytes, k, K, acc);
  }
  if (k < K) {
    bf16_chunk<R, NT, true>(xp, ldx, w, row_bytes, k, K, acc);
  }
  store_lane_sums<R, NT>(acc, y, ldy);
}

template <DType kDtype, int R, int NT>
EMBER_AVX2_INLINE void tile(const float* x, int64_t ldx, int64_t K, const uint8_t* w,
                            int64_t row_bytes, float* y, int64_t ldy, LinePrefetcher* prefetch) {
  if constexpr (kDtype == DType::BF16) {
    tile_bf16<R, NT>(x, ldx, K, w, row_bytes, y, ldy, prefetch);
  } else {
    tile_f32_f16<kDtype, R, NT>(x, ldx, K, w, row_bytes, y, ldy, prefetch);
  }
}

// --- T > 1: row panels converted to f32 once, then f32 tiles ---------------------------------

// The instantiation of matmul_panels / convert_panel that serves every block type beyond q8_0 /
// q4_0 (quant_row_dot.h): its panels are dequantized by dequantize_rows(w.dtype, ...).
constexpr DType kOtherBlockTypes = DType::Q4_K;

// Rows [0, rows) of a panel as f32 in the order the T = 1 kernel multiplies them, row i at
// out + i * ldw: f16 widened in place; bf16 as per-16 chunks of 8 even then 8 odd values, zero-
// padded to ldw = K rounded up to 16 (matching the de-interleaved activations). Running the plain
// f32 tile over this gives every output the same FMA sequence as the T = 1 kernel, so results stay
// bit-identical across T.
// q8_0 / q4_0 are dequantized (exactly: d * q) in element order, ldw = K, from either layout
// (rows [row0, row0 + rows) of wm; w = the bytes at row0 in the Rows layout).
// The raw rows are one contiguous span, read once: it is prefetched a few KiB ahead (up to
// `limit`).
template <DType kDtype>
EMBER_AVX2 void convert_panel(const WeightMatrix& wm, int64_t row0, const uint8_t* w,
                              int64_t row_bytes, int64_t rows, int64_t K, float* out, int64_t ldw,
                              const uint8_t* limit) {
  if constexpr (kDtype == kOtherBlockTypes) {
    if (wm.layout == WeightLayout::Interleaved8) {  // q5_0 / iq4_nl: row by row as Rows bytes
      thread_local std::vector<uint8_t> plain;
      plain.resize(static_cast<size_t>(row_bytes));
      for (int64_t i = 0; i < rows; ++i) {
        rows_layout_row(wm, row0 + i, plain.data());
        dequantize_rows(wm.dtype, plain.data(), row_bytes, 1, K, out + i * ldw, ldw);
      }
      return;
    }
    dequantize_rows(wm.dtype, w, row_bytes, rows, K, out, ldw);
    return;
  } else if constexpr (kDtype == DType::Q8_0 || kDtype == DType::Q4_0) {
    const int64_t blocks = K / kQuantBlock;
    const bool interleaved = wm.layout == WeightLayout::Interleaved8;
    auto prefetch = LinePrefetcher::ahead(interleaved ? interleaved_group(wm, row0) : w,
                                          rows * row_bytes, limit, rows * blocks, true);
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* row = w + i * row_bytes;
      const uint8_t* group = interleaved ? interleaved_group(wm, row0 + i) : nullptr;
      const int r = static_cast<int>((row0 + i) % kInterleavedRows);
      float* o = out + i * ldw;
      for (int64_t b = 0; b < blocks; ++b) {
        prefetch.step();
        __m256 v[4];
        if constexpr (kDtype == DType::Q8_0) {
          if (interleaved) {
            load_interleaved_q8_0(reinterpret_cast<const BlockQ8_0x8*>(group) + b, r, v);
          } else {
            load_block_q8_0(reinterpret_cast<const BlockQ8_0*>(row) + b, v);
          }
        } else {
          if (interleaved) {
            load_interleaved_q4_0(reinterpret_cast<const BlockQ4_0x8*>(group) + b, r, v);
          } else {
            load_block_q4_0(reinterpret_cast<const BlockQ4_0*>(row) + b, v);
          }
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(o + b * kQuantBlock + 8 * c, v[c]);
      }
    }
    return;
  }
  constexpr int64_t kStep = kDtype == DType::BF16 ? 16 : 8;
  auto prefetch =
      LinePrefetcher::ahead(w, rows * row_bytes, limit, rows * ((K + kStep - 1) / kStep), true);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = w + i * row_bytes;
    float* o = out + i * ldw;
    if constexpr (kDtype == DType::BF16) {
      for (int64_t k = 0; k < K; k += 16) {
        prefetch.step();
        __m256 even, odd;
        load16_bf16(row, k, K, &even, &odd);
        _mm256_storeu_ps(o + k, even);
        _mm256_storeu_ps(o + k + 8, odd);
      }
    } else {
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) {
        prefetch.step();
        _mm256_storeu_ps(o + k, load8_f16(row, k));
      }
      if (k < K) _mm256_maskstore_ps(o + k, tail_mask(K - k), load_tail(kDtype, row, k, K - k));
    }
  }
}

// Panels of 24 weight rows: T >= 16 for every dtype, and f32 from T = 5 on (f16/bf16 below 16
// tokens: matmul_token_chunks). f16/bf16 panels are converted (q8_0/q4_0 panels dequantized) to
// f32 once per call and then serve all T tokens from L2; f32 rows are used in place (prefetched a
// tile ahead on their first pass). T >= 16 (x grouped): panel_lanes. T < 16: token blocks keep the
// activations in use within ~128 KiB (L2) however long K is, and each 4-row tile stays in L1 while
// all token groups of the block pass it.
template <DType kDtype>
EMBER_AVX2 void matmul_panels(const float* x, int64_t ldx, int64_t T, const WeightMatrix& w,
                              float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  constexpr int64_t kPanel = 24;
  const int64_t K = w.n_cols;
  const int64_t Kp = ldx;  // K, or K rounded up to 16 for bf16
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  thread_local AlignedVector<float> panel_buf;
  if constexpr (kDtype != DType::F32) {
    if (static_cast<int64_t>(panel_buf.size()) < kPanel * Kp) {
      panel_buf.resize(static_cast<size_t>(kPanel * Kp));
    }
  }
  // A multiple of 3 tokens whose activations fit ~128 KiB (L2).
  const int64_t token_block = std::clamp<int64_t>((128 * 1024 / (4 * Kp)) / 3 * 3, 3, 63);
  const bool lanes = T >= kGroupTokens;  // then x is grouped: [G, Kp, 16]
  for (int64_t p = row_begin; p < row_end; p += kPanel) {
    const int64_t rows = std::min(kPanel, row_end - p);
    const float* pw;
    int64_t ldw;
    if constexpr (kDtype == DType::F32) {
      pw = reinterpret_cast<const float*>(base + p * rb);
      ldw = rb / static_cast<int64_t>(sizeof(float));
    } else {
      // On the lanes path the panel's rows were prefetched while the previous panel computed;
      // only the first panel prefetches (its successor) during its own conversion.
      const uint8_t* limit = !lanes || p == row_begin ? base + row_end * rb : base + p * rb;
      convert_panel<kDtype>(w, p, base + p * rb, rb, rows, K, panel_buf.data(), Kp, limit);
      pw = panel_buf.data();
      ldw = Kp;
    }
    if (lanes) {
      // The next panel's raw rows, spread over this panel's tiles (first token group only).
      const int64_t next_rows = std::clamp<int64_t>(row_end - p - kPanel, 0, kPanel);
      const uint8_t* next = base + (p + kPanel) * rb;
      const int64_t tile_rows = lanes_tile_rows();
      const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
      LinePrefetcher next_panel(next, next + next_rows * rb, tiles * ((Kp + 3) / 4), true);
      panel_lanes(x, T, Kp, pw, ldw, rows, y + p, ldy,
                  kDtype == DType::F32 ? base + row_end * rb : nullptr,
                  kDtype == DType::F32 || p == row_begin ? nullptr : &next_panel);
      continue;
    }
    for (int64_t t0 = 0; t0 < T; t0 += token_block) {
      const int64_t t1 = std::min(T, t0 + token_block);
      // Each 4-row tile (<= 24 KiB) stays in L1 while all token groups pass it.
      const auto* pwb = reinterpret_cast<const uint8_t*>(pw);
      const int64_t prb = ldw * static_cast<int64_t>(sizeof(float));
      int64_t n = 0;
      for (; n + 4 <= rows; n += 4) {
        // f32 rows come straight from memory on the first pass: prefetch the next tile meanwhile.
        auto prefetch = LinePrefetcher::ahead(pwb + n * prb, 4 * prb, base + row_end * rb, Kp / 8,
                                              /*to_l2=*/true);
        for (int64_t t = t0; t < t1; t += 3) {
          const int nt = static_cast<int>(std::min<int64_t>(3, t1 - t));
          float* yt = y + t * ldy + p + n;
          const float* xt = x + t * ldx;
          LinePrefetcher* pf = kDtype == DType::F32 && t == 0 ? &prefetch : nullptr;
          if (nt == 3) {
            tile_f32_f16<DType::F32, 4, 3>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, pf);
          } else if (nt == 2) {
            tile_f32_f16<DType::F32, 4, 2>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, pf);
          } else {
            tile_f32_f16<DType::F32, 4, 1>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, pf);
          }
        }
      }
      for (; n < rows; ++n) {
        for (int64_t t = t0; t < t1; t += 3) {
          const int nt = static_cast<int>(std::min<int64_t>(3, t1 - t));
          float* yt = y + t * ldy + p + n;
          const float* xt = x + t * ldx;
          if (nt == 3) {
            tile_f32_f16<DType::F32, 1, 3>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, nullptr);
          } else if (nt == 2) {
            tile_f32_f16<DType::F32, 1, 2>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, nullptr);
          } else {
            tile_f32_f16<DType::F32, 1, 1>(xt, ldx, Kp, pwb + n * prb, prb, yt, ldy, nullptr);
          }
        }
      }
    }
  }
}

// T <= 4 (decode, batched decode: memory-bound): every token at once against R(T) raw weight rows
// (8 x 1, 6 x 2, 4 x 3, 3 x 4: 8 to 12 independent FMA chains to cover the FMA latency), so each
// weight is read and converted once. bf16/f16 rows (1 KiB-ish) are prefetched a few KiB ahead:
// the hardware prefetcher alone leaves the bus idle at each new tile (bf16 decode +25%). f32 rows
// are twice as long and the hardware keeps up; software prefetch there cost 19% (same-run A/B).
template <DType kDtype, int NT>
EMBER_AVX2 void matmul_few_tokens(const float* x, int64_t ldx, const WeightMatrix& w, float* y,
                                  int64_t ldy, int64_t row_begin, int64_t row_end) {
  constexpr int R = NT == 1 ? 8 : NT == 2 ? 6 : NT == 3 ? 4 : 3;
  const int64_t K = w.n_cols;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  constexpr int64_t kStep = kDtype == DType::BF16 ? 16 : 8;
  const int64_t steps = (K + kStep - 1) / kStep;
  int64_t n = row_begin;
  for (; n + R <= row_end; n += R) {
    auto prefetch = LinePrefetcher::ahead(base + n * rb, R * rb, base + row_end * rb, steps,
                                          /*to_l2=*/NT == 1);
    tile<kDtype, R, NT>(x, ldx, K, base + n * rb, rb, y + n, ldy,
                        kDtype == DType::F32 ? nullptr : &prefetch);
  }
  for (; n < row_end; ++n) tile<kDtype, 1, NT>(x, ldx, K, base + n * rb, rb, y + n, ldy, nullptr);
}

// 5 <= T < 16 f16 / bf16 tokens (speculative verification, small batches): each 3-row tile of raw
// weight rows runs against the tokens in chunks of up to 4, so the rows come from memory once (the
// first chunk's pass, which prefetches ahead) and from L1 for the other chunks, each widening them
// again in registers. The panel path converts the rows to an f32 panel first: writing and reading
// back 4 bytes per weight cost more than the widening it saves below 16 tokens (SmolLM2-shaped
// bf16: a 5-token step took 2.6x a 1-token step, 4 tokens 1.6x). Same tile kernels as T <= 4, so
// every output has the same bits as there.
template <DType kDtype>
EMBER_AVX2 void matmul_token_chunks(const float* x, int64_t ldx, int64_t T, const WeightMatrix& w,
                                    float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  constexpr int R = 3;
  const int64_t K = w.n_cols;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes;
  constexpr int64_t kStep = kDtype == DType::BF16 ? 16 : 8;
  const int64_t steps = (K + kStep - 1) / kStep;
  const auto run_chunks = [&]<int kRows>(int64_t n, LinePrefetcher* prefetch) EMBER_AVX2_LAMBDA {
    for (int64_t t = 0; t < T; t += 4) {
      const float* xt = x + t * ldx;
      float* yt = y + t * ldy + n;
      const uint8_t* wn = base + n * rb;
      LinePrefetcher* pf = t == 0 ? prefetch : nullptr;
      switch (std::min<int64_t>(4, T - t)) {
        case 1:
          tile<kDtype, kRows, 1>(xt, ldx, K, wn, rb, yt, ldy, pf);
          break;
        case 2:
          tile<kDtype, kRows, 2>(xt, ldx, K, wn, rb, yt, ldy, pf);
          break;
        case 3:
          tile<kDtype, kRows, 3>(xt, ldx, K, wn, rb, yt, ldy, pf);
          break;
        default:
          tile<kDtype, kRows, 4>(xt, ldx, K, wn, rb, yt, ldy, pf);
          break;
      }
    }
  };
  int64_t n = row_begin;
  for (; n + R <= row_end; n += R) {
    auto prefetch = LinePrefetcher::ahead(base + n * rb, R * rb, base + row_end * rb, steps);
    run_chunks.template operator()<R>(n, &prefetch);
  }
  for (; n < row_end; ++n) run_chunks.template operator()<1>(n, nullptr);
}

// x: activations in the kernel's layout (de-interleaved for bf16), ldx floats per token.
template <DType kDtype>
EMBER_AVX2 void matmul_dtype(const float* x, int64_t ldx, int64_t T, const WeightMatrix& w,
                             float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  switch (T) {
    case 1:
      return matmul_few_tokens<kDtype, 1>(x, ldx, w, y, ldy, row_begin, row_end);
    case 2:
      return matmul_few_tokens<kDtype, 2>(x, ldx, w, y, ldy, row_begin, row_end);
    case 3:
      return matmul_few_tokens<kDtype, 3>(x, ldx, w, y, ldy, row_begin, row_end);
    case 4:
      return matmul_few_tokens<kDtype, 4>(x, ldx, w, y, ldy, row_begin, row_end);
    default:
      if (kDtype != DType::F32 && T < kGemmMinTokens) {
        return matmul_token_chunks<kDtype>(x, ldx, T, w, y, ldy, row_begin, row_end);
      }
      return matmul_panels<kDtype>(x, ldx, T, w, y, ldy, row_begin, row_end);
  }
}

}  // namespace

// Prepared layout: Kp = K (f32, f16) or K rounded up to 16 (bf16, de-interleaved per 16 values);
// T < 16: [T, Kp] token rows; T >= 16: [G, Kp, 16] token groups (group_tokens).
int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K) {
  const int64_t Kp = prepared_stride(dtype, K);
  return T >= kGroupTokens ? (T + kGroupTokens - 1) / kGroupTokens * kGroupTokens * Kp : T * Kp;
}

void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp) {
  const int64_t Kp = prepared_stride(dtype, K);
  if (T < kGroupTokens) {
    if (dtype == DType::BF16) {
      deinterleave_activations(x + token_begin * K, token_end - token_begin, K,
                               xp + token_begin * Kp);
    } else {
      std::copy(x + token_begin * K, x + token_end * K, xp + token_begin * K);
    }
    return;
  }
  if (dtype != DType::BF16) {
    group_tokens(x + token_begin * K, K, token_begin, token_end, K, xp);
    return;
  }
  thread_local AlignedVector<float> rows;  // one group de-interleaved, then grouped
  if (static_cast<int64_t>(rows.size()) < kGroupTokens * Kp) {
    rows.resize(static_cast<size_t>(kGroupTokens * Kp));
  }
  for (int64_t t0 = token_begin; t0 < token_end; t0 += kGroupTokens) {
    const int64_t t1 = std::min(token_end, t0 + kGroupTokens);
    deinterleave_activations(x + t0 * K, t1 - t0, K, rows.data());
    group_tokens(rows.data(), Kp, t0, t1, Kp, xp);
  }
}

void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end) {
  const int64_t Kp = prepared_stride(w.dtype, w.n_cols);
  switch (w.dtype) {
    case DType::F32:
      return matmul_dtype<DType::F32>(xp, Kp, T, w, y, ldy, row_begin, row_end);
    case DType::F16:
      return matmul_dtype<DType::F16>(xp, Kp, T, w, y, ldy, row_begin, row_end);
    case DType::BF16:
      return matmul_dtype<DType::BF16>(xp, Kp, T, w, y, ldy, row_begin, row_end);
    case DType::Q8_0:
    case DType::Q4_0:
      // With 8-bit activations the prepared layout is x itself, quantized as in matmul().
      if (uses_8bit_activations(w, T)) return avx2::matmul(xp, T, w, y, ldy, row_begin, row_end);
      if (w.dtype == DType::Q8_0)
        return matmul_panels<DType::Q8_0>(xp, Kp, T, w, y, ldy, row_begin, row_end);
      return matmul_panels<DType::Q4_0>(xp, Kp, T, w, y, ldy, row_begin, row_end);
    default:
      if (uses_8bit_activations(w, T)) return avx2::matmul(xp, T, w, y, ldy, row_begin, row_end);
      return matmul_panels<kOtherBlockTypes>(xp, Kp, T, w, y, ldy, row_begin, row_end);
  }
}

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  if (uses_8bit_activations(w, T)) {
    // Quantized weights (interleaved: always; else below kGemmMinTokens) take 8-bit activations.
    thread_local AlignedVector<BlockQ8Act> xq;
    const size_t blocks = static_cast<size_t>(T * (w.n_cols / kQuantBlock));
    if (xq.size() < blocks) xq.resize(blocks);
    avx2::quantize_activations(x, T, w.n_cols, xq.data());
    avx2::matmul_q8(xq.data(), T, w, y, ldy, row_begin, row_end);
    return;
  }
  if ((w.dtype == DType::F32 || w.dtype == DType::F16) && T < kGroupTokens) {
    // The kernels read x as it is.
    if (w.dtype == DType::F32)
      return matmul_dtype<DType::F32>(x, w.n_cols, T, w, y, ldy, row_begin, row_end);
    return matmul_dtype<DType::F16>(x, w.n_cols, T, w, y, ldy, row_begin, row_end);
  }
  // One-off callers; the forward pass prepares once per input (matmul_prepared).
  thread_local AlignedVector<float> prepared;
  const int64_t floats = prepared_activation_floats(w.dtype, T, w.n_cols);
  if (static_cast<int64_t>(prepared.size()) < floats) prepared.resize(static_cast<size_t>(floats));
  prepare_activations(w.dtype, x, T, w.n_cols, 0, T, prepared.data());
  avx2::matmul_prepared(prepared.data(), T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx2
