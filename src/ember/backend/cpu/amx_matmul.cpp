// AMX-BF16 tile GEMM (TDPBF16PS) and the AMX kernel set's matmul entry points; see amx_kernels.h.
//
// Prepared activations (every weight dtype that reads bf16 input under this set): plain bf16 rows,
// [ceil(T / 16) * 16 tokens][K32 / 2 pairs] (K32 = K rounded up to 32, zeros past K; the padding
// tokens zero), so a 16-token A tile is 16 rows of 64 bytes at a fixed stride for any T.
//
// The GEMM takes the thread's rows in groups of 256 (their B tiles, 288 KiB for K = 576, stay in
// L2) and, within a group, each pair of 16-token tiles against every pair of 16-row tiles: 4
// accumulator tiles (C, 16 x 16 f32), 2 A tiles and 2 B tiles, each A and B tile load feeding two
// TDPBF16PS. The pair's A (2 KiB a chunk of K: 36 KiB for K = 576) stays in L1 while the group's
// B tiles stream past it from L2, loaded with the non-temporal hint (TILELOADDT1) so they do not
// push A out; K past 24 chunks runs in slabs of at most 12 so A still fits, C kept in y between
// slabs (an f32 store and reload: the sums are those of one pass). Each thread takes whole rows
// for all T tokens (CpuBackend splits these matmuls by rows), so a q8_0 / q4_0 block is widened
// once per step (all of the thread's blocks first, into a per-thread panel).
//
// Measured (one thread, 512 tokens, Xeon with AMX, same run): 1.3-1.65 TFLOP/s with operands in
// cache, 35-45% of the tile unit's measured peak (the earlier order, all tokens against one row
// pair: 1.1-1.4); ~0.87 with the weights and the output fresh from memory, as in the engine.
// oneDNN 2.6's brgemm (libdnnl) ran the same shapes 1.2-1.5x faster than that earlier order in
// isolation, with weights in this very layout (its BA16a64b2a), but inside the engine it lost
// (0.75-0.9x of it, same run): 2.6 runs its brgemm only on dense src and dst (a strided output
// falls to its reference code), so each call needs a copy out, and its bits for a row depend on
// the call's row count, so keeping results independent of the thread split needs fixed pieces.
// So this kernel stays; the README's AMX section has the figures.
#include <algorithm>
#include <cstring>

#include "ember/backend/cpu/amx_kernels.h"
#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/core/aligned_vector.h"

#define EMBER_AMX __attribute__((target(EMBER_AVX512_TARGET ",amx-tile,amx-bf16,amx-int8")))

namespace ember::cpu::amx {
namespace {

constexpr int64_t kTileTokens = 16;

// bf16 pairs per token of the prepared activations.
int64_t pairs_per_token(int64_t K) {
  return amx_chunks(K) * kAmxChunkK / 2;
}

// Tiles 0-3: C (16 x 16 f32); 4-5: A (16 tokens x 32 bf16); 6-7: B (16 pairs x 16 rows x 2).
EMBER_AMX void configure_tiles() {
  AmxTileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.rows[i] = 16;
    config.colsb[i] = 64;
  }
  // (Not _tile_loadconfig: GCC 12 declares its operand as 8 bytes, so the stores that fill the
  // rest of the struct may be dropped as dead; this operand is the whole 64-byte object.)
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// TILESTORED of C tile `tile` (0-3; GCC's intrinsics take the tile number as a literal).
EMBER_AMX void store_c(int tile, float* dst, int64_t stride_bytes) {
  switch (tile) {
    case 0:
      _tile_stored(0, dst, stride_bytes);
      break;
    case 1:
      _tile_stored(1, dst, stride_bytes);
      break;
    case 2:
      _tile_stored(2, dst, stride_bytes);
      break;
    default:
      _tile_stored(3, dst, stride_bytes);
      break;
  }
}

// Stores C tile `tile` (tokens t0.., rows n0..) into y, only the tokens below T and the rows in
// [row_begin, row_end).
EMBER_AMX void store_tile(int tile, float* y, int64_t ldy, int64_t t0, int64_t n0, int64_t T,
                          int64_t row_begin, int64_t row_end) {
  if (t0 + kTileTokens <= T && n0 >= row_begin && n0 + kAmxTileRows <= row_end) {
    store_c(tile, y + t0 * ldy + n0, ldy * static_cast<int64_t>(sizeof(float)));
    return;
  }
  alignas(64) float c[kTileTokens * kAmxTileRows];
  store_c(tile, c, kAmxTileRows * static_cast<int64_t>(sizeof(float)));
  const int64_t nb = std::max(row_begin, n0), ne = std::min(row_end, n0 + kAmxTileRows);
  for (int64_t t = t0; t < std::min(T, t0 + kTileTokens); ++t) {
    for (int64_t n = nb; n < ne; ++n) y[t * ldy + n] = c[(t - t0) * kAmxTileRows + (n - n0)];
  }
}

// Loads C tile `tile` (tokens t0.., rows n0..) from y, or zeros where the tile runs past T or
// [row_begin, row_end) (those parts are never stored).
EMBER_AMX void load_tile(int tile, const float* y, int64_t ldy, int64_t t0, int64_t n0, int64_t T,
                         int64_t row_begin, int64_t row_end) {
  alignas(64) float c[kTileTokens * kAmxTileRows];
  const float* src = y + t0 * ldy + n0;
  int64_t stride = ldy;
  if (t0 + kTileTokens > T || n0 < row_begin || n0 + kAmxTileRows > row_end) {
    std::fill(c, c + kTileTokens * kAmxTileRows, 0.0f);
    const int64_t nb = std::max(row_begin, n0), ne = std::min(row_end, n0 + kAmxTileRows);
    for (int64_t t = t0; t < std::min(T, t0 + kTileTokens); ++t) {
      for (int64_t n = nb; n < ne; ++n) c[(t - t0) * kAmxTileRows + (n - n0)] = y[t * ldy + n];
    }
    src = c;
    stride = kAmxTileRows;
  }
  const int64_t bytes = stride * static_cast<int64_t>(sizeof(float));
  // GCC's TILELOADD is an asm without a memory operand: without this barrier the stores to c
  // above may be dropped as dead or moved past the load.
  __asm__ volatile("" : : : "memory");
  switch (tile) {
    case 0:
      _tile_loadd(0, src, bytes);
      break;
    case 1:
      _tile_loadd(1, src, bytes);
      break;
    case 2:
      _tile_loadd(2, src, bytes);
      break;
    default:
      _tile_loadd(3, src, bytes);
      break;
  }
}

// Where a micro-kernel works: token tiles t0 (and t0 + 16 when MT = 2), row tiles n0 (and
// n0 + 16 when NB = 2) of y, chunks [c0, c1) of K; C starts from y when `accumulate`.
struct TileBlock {
  int64_t t0, n0, c0, c1;
  bool accumulate;
};

// MT token tiles x NB row tiles (1 or 2 each) over chunks [c0, c1), then stored. B, streamed from
// L2 once per token pair, is loaded with the non-temporal hint (TILELOADDT1) so that it does not
// push A, which every row tile of the group reuses, out of L1.
template <int MT, int NB>
EMBER_AMX void micro_kernel(const uint32_t* x, int64_t P, const uint8_t* b0, const uint8_t* b1,
                            float* y, int64_t ldy, const TileBlock& at, int64_t T,
                            int64_t row_begin, int64_t row_end) {
  const int64_t x_stride = P * static_cast<int64_t>(sizeof(uint32_t));
  const int64_t t1 = at.t0 + kTileTokens, n1 = at.n0 + kAmxTileRows;
  if (at.accumulate) {
    load_tile(0, y, ldy, at.t0, at.n0, T, row_begin, row_end);
    if constexpr (NB == 2) load_tile(1, y, ldy, at.t0, n1, T, row_begin, row_end);
    if constexpr (MT == 2) load_tile(2, y, ldy, t1, at.n0, T, row_begin, row_end);
    if constexpr (MT == 2 && NB == 2) load_tile(3, y, ldy, t1, n1, T, row_begin, row_end);
  } else {
    _tile_zero(0);
    if constexpr (NB == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NB == 2) _tile_zero(3);
  }
  const uint32_t* a0 = x + at.t0 * P;
  const uint32_t* a1 = a0 + kTileTokens * P;
  // Each operand load placed just before its first product, so loads overlap the products in
  // flight.
  for (int64_t c = at.c0; c < at.c1; ++c) {
    const int64_t xo = c * (kAmxChunkK / 2), wo = c * kAmxChunkBytes;
    _tile_loadd(4, a0 + xo, x_stride);
    _tile_stream_loadd(6, b0 + wo, kAmxTileStride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) {
      _tile_stream_loadd(7, b1 + wo, kAmxTileStride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (MT == 2) {
      _tile_loadd(5, a1 + xo, x_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  store_tile(0, y, ldy, at.t0, at.n0, T, row_begin, row_end);
  if constexpr (NB == 2) store_tile(1, y, ldy, at.t0, n1, T, row_begin, row_end);
  if constexpr (MT == 2) store_tile(2, y, ldy, t1, at.n0, T, row_begin, row_end);
  if constexpr (MT == 2 && NB == 2) store_tile(3, y, ldy, t1, n1, T, row_begin, row_end);
}

// Rows in the AmxTiles layout: row r is row r - first_row of `data`.
struct TiledRows {
  const uint8_t* data;
  int64_t first_row;
};

// The blocks (64 rows) holding rows [row_begin, row_end) in the AmxTiles layout: in place for an
// AmxTiles matrix, else widened (q8_0 / q4_0) or packed (bf16 Rows) into a per-thread panel, once
// for all the tokens.
TiledRows blocks_of_rows(const WeightMatrix& w, int64_t row_begin, int64_t row_end) {
  if (w.layout == WeightLayout::AmxTiles) return {static_cast<const uint8_t*>(w.data), 0};
  const int64_t block_bytes = amx_block_bytes(w.n_cols);
  const int64_t first = row_begin / kAmxBlockRows, last = (row_end - 1) / kAmxBlockRows;
  thread_local AlignedVector<uint8_t> panel;
  if (static_cast<int64_t>(panel.size()) < (last - first + 1) * block_bytes) {
    panel.resize(static_cast<size_t>((last - first + 1) * block_bytes));
  }
  for (int64_t b = first; b <= last; ++b) {
    uint8_t* out = panel.data() + (b - first) * block_bytes;
    if (w.dtype == DType::BF16) {
      pack_amx_block(w, b, out);
    } else {
      widen_block_to_tiles(w, b, out);
    }
  }
  return {panel.data(), first * kAmxBlockRows};
}

// K chunks per slab: A's 32 tokens x slab (2 KiB a chunk) stay in L1 while the group's B tiles
// stream past them. Up to 24 chunks (K = 768) in one slab; beyond, even slabs of at most 12,
// with C kept in y between slabs (stored and reloaded in f32: the sums are those of one pass).
int64_t slab_chunks(int64_t chunks) {
  if (chunks <= 24) return chunks;
  const int64_t slabs = (chunks + 11) / 12;
  return (chunks + slabs - 1) / slabs;
}

// The row tiles [g0, g1) (pairs of 16 from g0, g0 % 32 == 0) against every token, slab by slab.
template <int MT>
EMBER_AMX void row_group(const uint32_t* xp, int64_t P, const TiledRows& rows, int64_t K,
                         int64_t t0, int64_t g0, int64_t g1, float* y, int64_t ldy, int64_t T,
                         int64_t row_begin, int64_t row_end) {
  const int64_t chunks = amx_chunks(K), slab = slab_chunks(chunks);
  for (int64_t c0 = 0; c0 < chunks; c0 += slab) {
    for (int64_t n0 = g0; n0 < g1; n0 += 2 * kAmxTileRows) {
      const uint8_t* b0 = amx_tile(rows.data, K, n0 - rows.first_row);
      const TileBlock at{t0, n0, c0, std::min(chunks, c0 + slab), c0 > 0};
      if (n0 + kAmxTileRows < g1) {
        micro_kernel<MT, 2>(xp, P, b0, b0 + 4 * kAmxTileRows, y, ldy, at, T, row_begin, row_end);
      } else {
        micro_kernel<MT, 1>(xp, P, b0, nullptr, y, ldy, at, T, row_begin, row_end);
      }
    }
  }
}

// The bytes of the blocks holding rows [g0, g1) of `rows` (64-byte lines from `begin`).
struct GroupBytes {
  const uint8_t* begin = nullptr;
  int64_t bytes = 0;
};

GroupBytes group_bytes(const TiledRows& rows, int64_t K, int64_t g0, int64_t g1) {
  if (g0 >= g1) return {};
  const int64_t block_row = g0 / kAmxBlockRows * kAmxBlockRows;
  return {amx_tile(rows.data, K, block_row - rows.first_row),
          amx_blocks(g1 - block_row) * amx_block_bytes(K)};
}

}  // namespace

// Rows in groups of kGroupRows (their B tiles, 288 KiB for K = 576, stay in L2); within a group,
// each pair of token tiles (A, up to 36 KiB, in L1) meets every row tile of the group. The next
// group's weights are brought to L2 a slice per token pair while this group runs (the first
// group's all at once), so no pass waits on memory for them.
EMBER_AMX void tiles_gemm(const uint32_t* xp, int64_t T, const WeightMatrix& w, float* y,
                          int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end || T <= 0) return;
  constexpr int64_t kGroupRows = 4 * kAmxBlockRows;
  const int64_t K = w.n_cols, P = pairs_per_token(K);
  const TiledRows rows = blocks_of_rows(w, row_begin, row_end);
  configure_tiles();
  const int64_t first = row_begin / (2 * kAmxTileRows) * (2 * kAmxTileRows);
  const int64_t token_pairs = (T + 2 * kTileTokens - 1) / (2 * kTileTokens);
  const GroupBytes head = group_bytes(rows, K, first, std::min(row_end, first + kGroupRows));
  for (int64_t i = 0; i < head.bytes; i += 64) _mm_prefetch(head.begin + i, _MM_HINT_T1);
  for (int64_t g0 = first; g0 < row_end; g0 += kGroupRows) {
    const int64_t g1 = std::min(row_end, g0 + kGroupRows);
    const GroupBytes next = group_bytes(rows, K, g1, std::min(row_end, g1 + kGroupRows));
    const int64_t slice = (next.bytes / 64 + token_pairs - 1) / token_pairs * 64;
    for (int64_t pair = 0; pair < token_pairs; ++pair) {
      const int64_t t0 = pair * 2 * kTileTokens;
      for (int64_t i = pair * slice; i < std::min(next.bytes, (pair + 1) * slice); i += 64) {
        _mm_prefetch(next.begin + i, _MM_HINT_T1);
      }
      if (t0 + kTileTokens < T) {
        row_group<2>(xp, P, rows, K, t0, g0, g1, y, ldy, T, row_begin, row_end);
      } else {
        row_group<1>(xp, P, rows, K, t0, g0, g1, y, ldy, T, row_begin, row_end);
      }
    }
  }
}

bool runs_on_tiles(const WeightMatrix& w, int64_t T) {
  if (T < kAmxMinTokens) return false;
  if (w.dtype == DType::BF16) return true;
  return (w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0) &&
         w.layout == WeightLayout::Interleaved8;
}

MatmulInput matmul_input(const WeightMatrix& w, int64_t T) {
  if (w.dtype == DType::BF16 || runs_on_tiles(w, T)) return MatmulInput::Bf16;
  return uses_8bit_activations(w, T) ? MatmulInput::Q8 : MatmulInput::F32;
}

int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K) {
  if (dtype != DType::BF16) return avx512::prepared_activation_floats(dtype, T, K);
  return (T + kTileTokens - 1) / kTileTokens * kTileTokens * pairs_per_token(K);
}

EMBER_AVX512 void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K,
                                      int64_t token_begin, int64_t token_end, float* xp) {
  if (dtype != DType::BF16) {
    return avx512::prepare_activations(dtype, x, T, K, token_begin, token_end, xp);
  }
  const int64_t P = pairs_per_token(K);
  auto* out = reinterpret_cast<uint32_t*>(xp);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const float* xt = x + t * K;
    for (int64_t k = 0; k < 2 * P; k += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(avx512::lanes16(K - k), xt + k);
      const __m512 hi = _mm512_maskz_loadu_ps(avx512::lanes16(K - k - 16), xt + k + 16);
      const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);  // lo fills the low 16 values
      _mm512_storeu_si512(out + t * P + k / 2, reinterpret_cast<const __m512i&>(v));
    }
  }
  if (token_end == T) {  // the last tile's padding tokens
    const int64_t padded = (T + kTileTokens - 1) / kTileTokens * kTileTokens;
    std::fill(out + T * P, out + padded * P, 0u);
  }
}

void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end) {
  const auto* x = reinterpret_cast<const uint32_t*>(xp);
  if (runs_on_tiles(w, T)) return tiles_gemm(x, T, w, y, ldy, row_begin, row_end);
  if (w.layout == WeightLayout::AmxTiles) return tiles_gemv(x, T, w, y, ldy, row_begin, row_end);
  // bf16 Rows below 16 tokens: the AVX-512 decode kernel reads the same plain rows.
  if (w.dtype == DType::BF16) {
    return avx512::bf16_matmul_prepared(xp, T, w, y, ldy, row_begin, row_end);
  }
  avx512::matmul_prepared(xp, T, w, y, ldy, row_begin, row_end);
}

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  if (matmul_input(w, T) != MatmulInput::Bf16) {
    return avx512::matmul(x, T, w, y, ldy, row_begin, row_end);
  }
  thread_local AlignedVector<float> prepared;
  const int64_t floats = prepared_activation_floats(DType::BF16, T, w.n_cols);
  if (static_cast<int64_t>(prepared.size()) < floats) prepared.resize(static_cast<size_t>(floats));
  prepare_activations(DType::BF16, x, T, w.n_cols, 0, T, prepared.data());
  matmul_prepared(prepared.data(), T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::amx
