// Prefill attention on AMX tiles: the tokens of a query tile (16 or more consecutive tokens of one
// sequence) against their causal context, FlashAttention-style, both products on TDPBF16PS. Used
// for caches of 16 bits or fewer per value (f16, bf16, q8_0, q4_0: --kv-dtype); an f32 cache keeps
// the f32 kernel, as its precision is what was asked for.
//
// Transposed, so the softmax runs down the columns and needs no horizontal reductions: for one
// query head and a group of 16 tokens,
//   S^T [keys, tokens] = K [keys, head_dim] . Q^T      (A = K rows as stored, B = Q^T pairs)
//   O^T [head_dim, tokens] += V^T [head_dim, keys] . P^T (A = V^T, B = P^T pairs)
// 32 keys per step. A row of an S^T tile is one key across the 16 tokens (one vector): the running
// max, the exponentials and the denominators are lane-wise, and P^T's pairs (keys 2j, 2j + 1) are
// two rows interleaved. O^T stays in up to 4 accumulator tiles (64 values of head_dim per pass;
// larger heads take several passes) for the whole context: the running max is raised lazily, only
// when a token's new maximum exceeds it by more than kLazyRescaleLog2 (then that token's column
// is rescaled through memory), so the exponentials stay <= 2^kLazyRescaleLog2 and the usual
// per-step rescale of the accumulator is rarely paid.
//
// Per kv head the context's K rows are widened to bf16 once per call ([keys, head_dim], the A
// operand as it is) and V is transposed into [head_dim, keys] tiles; the group's query heads and
// all the tile's tokens share them. Scores are computed in the log2 domain: Q is multiplied by
// scale * log2(e) before its rounding to bf16.
//
// Numerics: Q, K, V and P rounded to bf16 (relative 2^-9 each), f32 accumulation; within the bf16
// tolerance of the f32 kernels (kernels_amx_test.cpp). A token's result depends only on its own
// query and its context (every per-token quantity is a lane of its own), not on the other tokens
// of the tile.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ember/backend/cpu/amx_kernels.h"
#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/aligned_vector.h"

#define EMBER_AMX __attribute__((target(EMBER_AVX512_TARGET ",amx-tile,amx-bf16,amx-int8")))

namespace ember::cpu::amx {
namespace {

constexpr int64_t kStepKeys = 32;     // keys per step: two S^T tiles, one P^T tile
constexpr int64_t kGroupTokens = 16;  // tokens per column group (a tile's 16 columns)
constexpr int64_t kPassDims = 64;     // head_dim values per pass: 4 O^T tiles
constexpr float kLazyRescaleLog2 = 8.0f;
// (Zero-masked forms with every lane: GCC 12's plain ones read an "undefined" vector and warn.)
constexpr auto kAll = static_cast<__mmask16>(0xffff);

// Tiles: 0-3 O^T; 4-5 S^T (keys 0-15, 16-31 of the step); 6 A; 7 B. All 16 rows x 64 bytes.
EMBER_AMX void configure_tiles() {
  AmxTileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.rows[i] = 16;
    config.colsb[i] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(config));  // (see amx_matmul.cpp)
}

using avx512::transpose16;

// 32 f32 values (lo: the first 16) as 32 bf16, in order.
EMBER_AVX512_INLINE __m512i to_bf16(__m512 lo, __m512 hi) {
  const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
  return reinterpret_cast<const __m512i&>(v);
}

// Two rows of 16 f32 (a, b) as 16 bf16 pairs (a_i, b_i): one row of a pair-layout B tile.
struct InterleaveIndex {
  alignas(64) uint16_t idx[32];
  constexpr InterleaveIndex() : idx() {
    for (int i = 0; i < 16; ++i) {
      idx[2 * i] = static_cast<uint16_t>(i);
      idx[2 * i + 1] = static_cast<uint16_t>(16 + i);
    }
  }
};
constexpr InterleaveIndex kInterleave;

EMBER_AVX512_INLINE __m512i interleave_bf16(__m512 a, __m512 b) {
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave.idx), to_bf16(a, b));
}

// 2^t for t <= ~kLazyRescaleLog2 (0 below 2^-126, -inf included): t = n + f, |f| <= 1/2, 2^f by a
// degree-4 polynomial (relative error < 4e-6, far below the bf16 rounding P gets), 2^n by
// vscalefps.
EMBER_AVX512_INLINE __m512 exp2(__m512 t) {
  const __mmask16 nonzero = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  t = _mm512_maskz_max_ps(kAll, t, _mm512_set1_ps(-126.0f));
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAll, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(9.6181291e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(nonzero, p, n);
}

struct Scratch {
  AlignedVector<uint16_t> k;      // [keys, head_dim] bf16: A tiles of S^T
  AlignedVector<uint32_t> vt;     // per step, per 16 head_dim values: a 1 KiB V^T tile
  AlignedVector<uint32_t> qt;     // per head_dim chunk of 32: a 1 KiB Q^T tile (B)
  AlignedVector<float> s;         // the two S^T tiles of a step: [32 keys][16 tokens]
  AlignedVector<uint32_t> pt;     // P^T tile: [16 key pairs][16 tokens] bf16 pairs
  AlignedVector<float> o;         // O^T spilled for a rescale or the result: [64][16]
  AlignedVector<uint32_t> pairs;  // a step's V pairs before the transpose: [d tile][16 j][16 d]
  std::vector<float> k_row, v_row[2];  // widened K / V rows (narrow caches)
};

// The f32 values of cache row `index` of K (or V): in place for an f32 cache, else widened into
// `row`.
const float* kv_row_f32(const uint8_t* row_bytes, DType dtype, int64_t hd,
                        std::vector<float>& row) {
  if (dtype == DType::F32) return reinterpret_cast<const float*>(row_bytes);
  row.resize(static_cast<size_t>(hd));
  kv_read_row(row_bytes, hd, dtype, row.data());
  return row.data();
}

// K rows [0, keys) of kv head g as bf16 [keys, hd] (keys rounded up to the step, zeros past the
// context), and V transposed into per-step tiles: vt tile (step, dt) row d holds the pairs (keys
// 2j, 2j + 1 of the step) of value 16 dt + d.
EMBER_AVX512 void pack_kv(const PagedKv& kv, const int32_t* block_table, int64_t keys, int64_t g,
                          Scratch& sc) {
  const int64_t hd = kv.head_dim, steps = (keys + kStepKeys - 1) / kStepKeys;
  const int64_t dtiles = hd / 16;
  if (static_cast<int64_t>(sc.k.size()) < steps * kStepKeys * hd) {
    sc.k.resize(static_cast<size_t>(steps * kStepKeys * hd));
  }
  if (static_cast<int64_t>(sc.vt.size()) < steps * dtiles * 256) {
    sc.vt.resize(static_cast<size_t>(steps * dtiles * 256));
  }
  if (static_cast<int64_t>(sc.pairs.size()) < dtiles * 256) {
    sc.pairs.resize(static_cast<size_t>(dtiles * 256));
  }
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t j = 0; j < 16; ++j) {
      const float* v[2] = {nullptr, nullptr};
      for (int e = 0; e < 2; ++e) {
        const int64_t key = step * kStepKeys + 2 * j + e;
        uint16_t* k_out = sc.k.data() + key * hd;
        if (key >= keys) {
          std::fill_n(k_out, hd, uint16_t{0});
          continue;
        }
        const int64_t at = kv.row_index(block_table[key / kv.block_size], key % kv.block_size, g);
        const float* k = kv_row_f32(kv.k_row(at), kv.k_dtype, hd, sc.k_row);
        for (int64_t d = 0; d < hd; d += 32) {
          _mm512_storeu_si512(k_out + d,
                              to_bf16(_mm512_loadu_ps(k + d), _mm512_loadu_ps(k + d + 16)));
        }
        v[e] = kv_row_f32(kv.v_row(at), kv.v_dtype, hd, sc.v_row[e]);
      }
      for (int64_t dt = 0; dt < dtiles; ++dt) {
        const __m512 a = v[0] != nullptr ? _mm512_loadu_ps(v[0] + 16 * dt) : _mm512_setzero_ps();
        const __m512 b = v[1] != nullptr ? _mm512_loadu_ps(v[1] + 16 * dt) : _mm512_setzero_ps();
        _mm512_store_si512(sc.pairs.data() + (dt * 16 + j) * 16, interleave_bf16(a, b));
      }
    }
    for (int64_t dt = 0; dt < dtiles; ++dt) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_load_si512(sc.pairs.data() + (dt * 16 + j) * 16);
      transpose16(r);  // r[d] = value d's pairs over the 16 key pairs
      uint32_t* tile = sc.vt.data() + (step * dtiles + dt) * 256;
      for (int d = 0; d < 16; ++d) _mm512_store_si512(tile + d * 16, r[d]);
    }
  }
}

// Q^T tiles of head h for tokens [u0, u0 + n) (n <= 16; the rest zero), times scale * log2(e):
// tile c row p = the pairs (32c + 2p, 32c + 2p + 1) of the 16 tokens.
EMBER_AVX512 void pack_q(const float* q, int64_t q_stride, int64_t h, int64_t hd, int64_t u0,
                         int64_t n, float factor, Scratch& sc) {
  if (static_cast<int64_t>(sc.qt.size()) < hd / 32 * 256) {
    sc.qt.resize(static_cast<size_t>(hd / 32 * 256));
  }
  const __m512 f = _mm512_set1_ps(factor);
  for (int64_t c = 0; c < hd / 32; ++c) {
    __m512i r[16];
    for (int64_t t = 0; t < 16; ++t) {
      if (t >= n) {
        r[t] = _mm512_setzero_si512();
        continue;
      }
      const float* row = q + (u0 + t) * q_stride + h * hd + 32 * c;
      r[t] = to_bf16(_mm512_mul_ps(_mm512_loadu_ps(row), f),
                     _mm512_mul_ps(_mm512_loadu_ps(row + 16), f));
    }
    transpose16(r);  // r[p] = pair p of every token
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(sc.qt.data() + c * 256 + p * 16, r[p]);
  }
}

// O^T tile `i` (0-3) to/from memory (GCC's intrinsics take the tile number as a literal).
EMBER_AMX void store_o(int i, float* dst) {
  switch (i) {
    case 0:
      _tile_stored(0, dst, 64);
      break;
    case 1:
      _tile_stored(1, dst, 64);
      break;
    case 2:
      _tile_stored(2, dst, 64);
      break;
    default:
      _tile_stored(3, dst, 64);
      break;
  }
}
EMBER_AMX void load_o(int i, const float* src) {
  switch (i) {
    case 0:
      _tile_loadd(0, src, 64);
      break;
    case 1:
      _tile_loadd(1, src, 64);
      break;
    case 2:
      _tile_loadd(2, src, 64);
      break;
    default:
      _tile_loadd(3, src, 64);
      break;
  }
}
EMBER_AMX void zero_o(int i) {
  switch (i) {
    case 0:
      _tile_zero(0);
      break;
    case 1:
      _tile_zero(1);
      break;
    case 2:
      _tile_zero(2);
      break;
    default:
      _tile_zero(3);
      break;
  }
}
// O^T tile i += V^T tile (A, tile 6) . P^T (B, tile 7).
EMBER_AMX void accumulate_o(int i, const uint32_t* vt_tile) {
  _tile_loadd(6, vt_tile, 64);
  switch (i) {
    case 0:
      _tile_dpbf16ps(0, 6, 7);
      break;
    case 1:
      _tile_dpbf16ps(1, 6, 7);
      break;
    case 2:
      _tile_dpbf16ps(2, 6, 7);
      break;
    default:
      _tile_dpbf16ps(3, 6, 7);
      break;
  }
}

// Per-token state of a column group: running max (log2 domain), denominator, context bounds.
struct Columns {
  __m512 m, l;
  __m512i ctx_len, first_key;  // token u sees keys [first_key, ctx_len)
};

// One step (keys k0..k0+31) for a column group: S^T, masks, lazy rescale, P^T, O^T += V^T P^T.
EMBER_AMX void step(Scratch& sc, int64_t hd, int64_t d0, int nd, int64_t step_index, int64_t k0,
                    bool masked, Columns& col) {
  // S^T for keys k0..k0+15 (tile 4) and k0+16..k0+31 (tile 5), over every 32 values of head_dim.
  _tile_zero(4);
  _tile_zero(5);
  const int64_t x_stride = hd * static_cast<int64_t>(sizeof(uint16_t));
  for (int64_t c = 0; c < hd / 32; ++c) {
    _tile_loadd(7, sc.qt.data() + c * 256, 64);
    _tile_loadd(6, sc.k.data() + k0 * hd + 32 * c, x_stride);
    _tile_dpbf16ps(4, 6, 7);
    _tile_loadd(6, sc.k.data() + (k0 + 16) * hd + 32 * c, x_stride);
    _tile_dpbf16ps(5, 6, 7);
  }
  float* s = sc.s.data();
  _tile_stored(4, s, 64);
  _tile_stored(5, s + 256, 64);
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 rows[kStepKeys];
  __m512 block_max = minus_inf;
  for (int64_t r = 0; r < kStepKeys; ++r) {
    rows[r] = _mm512_load_ps(s + r * 16);
    if (masked) {
      const __m512i key = _mm512_set1_epi32(static_cast<int>(k0 + r));
      const __mmask16 valid =
          _mm512_cmpgt_epi32_mask(col.ctx_len, key) & _mm512_cmple_epi32_mask(col.first_key, key);
      rows[r] = _mm512_mask_mov_ps(minus_inf, valid, rows[r]);
    }
    block_max = _mm512_maskz_max_ps(kAll, block_max, rows[r]);
  }
  // Lazy rescale: tokens whose maximum rose past m + kLazyRescaleLog2 (or had none yet).
  const __mmask16 raise = _mm512_cmp_ps_mask(
      block_max, _mm512_add_ps(col.m, _mm512_set1_ps(kLazyRescaleLog2)), _CMP_GT_OQ);
  if (raise != 0) {
    const __m512 m_new = _mm512_mask_mov_ps(col.m, raise, block_max);
    // alpha = 2^(m - m_new) for raised tokens that had a maximum; 0 for those that had none
    // (their l and O^T are 0), 1 for the rest.
    const __m512 alpha = exp2(_mm512_sub_ps(col.m, m_new));
    const __m512 factor = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), raise, alpha);
    col.l = _mm512_mul_ps(col.l, factor);
    float* o = sc.o.data();
    for (int i = 0; i < nd; ++i) {
      store_o(i, o + i * 256);
      for (int d = 0; d < 16; ++d) {
        _mm512_store_ps(o + i * 256 + d * 16,
                        _mm512_mul_ps(_mm512_load_ps(o + i * 256 + d * 16), factor));
      }
      load_o(i, o + i * 256);
    }
    col.m = m_new;
  }
  // m is -inf only for tokens with no valid key yet: their p must be 0, not 2^(-inf + inf).
  const __mmask16 has_max = _mm512_cmp_ps_mask(col.m, minus_inf, _CMP_NEQ_OQ);
  const __m512 m =
      _mm512_mask_mov_ps(_mm512_set1_ps(std::numeric_limits<float>::max()), has_max, col.m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < kStepKeys / 2; ++j) {
    const __m512 p0 = exp2(_mm512_sub_ps(rows[2 * j], m));
    const __m512 p1 = exp2(_mm512_sub_ps(rows[2 * j + 1], m));
    sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
    _mm512_store_si512(sc.pt.data() + j * 16, interleave_bf16(p0, p1));
  }
  col.l = _mm512_add_ps(col.l, sum);
  _tile_loadd(7, sc.pt.data(), 64);
  const uint32_t* vt = sc.vt.data() + (step_index * (hd / 16) + d0 / 16) * 256;
  for (int i = 0; i < nd; ++i) accumulate_o(i, vt + i * 256);
}

// Tokens [u0, u0 + n) (n <= 16) of head h: out rows, head h's head_dim values.
EMBER_AMX void column_group(const float* q, int64_t q_stride, int64_t h, const PagedKv& kv,
                            int64_t ctx0, int64_t u0, int64_t n, const AttentionScores& rules,
                            float* out, int64_t out_stride, Scratch& sc) {
  const int64_t hd = kv.head_dim;
  pack_q(q, q_stride, h, hd, u0, n, rules.scale * 1.4426950408889634f, sc);
  alignas(64) int32_t ctx_len[16], first_key[16];
  for (int64_t t = 0; t < 16; ++t) {
    ctx_len[t] = t < n ? static_cast<int32_t>(ctx0 + u0 + t) : 0;
    first_key[t] = t < n ? static_cast<int32_t>(rules.first_key(ctx0 + u0 + t)) : 0;
  }
  const int64_t key_end = ctx0 + u0 + n - 1;  // the last token's context
  const int64_t key_begin = rules.first_key(ctx0 + u0);
  const int64_t first_step = key_begin / kStepKeys;
  for (int64_t d0 = 0; d0 < hd; d0 += kPassDims) {
    const int nd = static_cast<int>(std::min<int64_t>(4, (hd - d0) / 16));
    Columns col{_mm512_set1_ps(-std::numeric_limits<float>::infinity()), _mm512_setzero_ps(),
                _mm512_load_si512(ctx_len), _mm512_load_si512(first_key)};
    for (int i = 0; i < nd; ++i) zero_o(i);
    for (int64_t st = first_step; st * kStepKeys < key_end; ++st) {
      const int64_t k0 = st * kStepKeys;
      // Unmasked when every key of the step is inside every token's window and context.
      const bool masked = k0 + kStepKeys > ctx0 + u0 || k0 < rules.first_key(key_end);
      step(sc, hd, d0, nd, st, k0, masked, col);
    }
    float* o = sc.o.data();
    for (int i = 0; i < nd; ++i) store_o(i, o + i * 256);
    alignas(64) float inv_l[16];
    _mm512_store_ps(inv_l, _mm512_div_ps(_mm512_set1_ps(1.0f), col.l));
    for (int64_t t = 0; t < n; ++t) {
      float* dst = out + (u0 + t) * out_stride + h * hd + d0;
      for (int64_t d = 0; d < 16 * nd; ++d) dst[d] = o[d * 16 + t] * inv_l[t];
    }
  }
}

}  // namespace

bool attention_runs_on_tiles(const PagedKv& kv, const AttentionScores& rules, int64_t nt) {
  // An f32 cache asks for f32 attention: the tiles would round its K and V to bf16.
  // Per-channel K (a block read exact or sealed by query position) runs on the AVX2 kernel.
  return nt >= kGroupTokens && rules.softcap == 0.0f && kv.head_dim % 32 == 0 &&
         kv.k_dtype != DType::F32 && kv.v_dtype != DType::F32 && !kv.k_channel;
}

EMBER_AMX void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                                const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                                const AttentionScores& rules, float* out, int64_t out_stride,
                                int64_t kv_head_begin, int64_t kv_head_end) {
  if (!attention_runs_on_tiles(kv, rules, nt)) {
    return avx512::attention_tokens(q, nt, q_stride, n_heads, kv, block_table, ctx0, rules, out,
                                    out_stride, kv_head_begin, kv_head_end);
  }
  thread_local Scratch sc;
  if (sc.s.empty()) {
    sc.s.resize(2 * 256);
    sc.pt.resize(256);
    sc.o.resize(4 * 256);
  }
  configure_tiles();
  const int64_t group = n_heads / kv.n_kv_heads;
  const int64_t keys = ctx0 + nt - 1;  // the last token's context
  for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
    pack_kv(kv, block_table, keys, g, sc);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t u0 = 0; u0 < nt; u0 += kGroupTokens) {
        column_group(q, q_stride, h, kv, ctx0, u0, std::min(kGroupTokens, nt - u0), rules, out,
                     out_stride, sc);
      }
    }
  }
}

}  // namespace ember::cpu::amx
