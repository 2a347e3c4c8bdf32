// AVX2 attention of one query token over its paged context, FlashAttention-style: the context is
// streamed a few KV blocks at a time (a softmax step) with an online softmax, so no [ctx_len] score
// row is ever built.
//
// Per kv head g, the `group` query heads that share it (GQA) are processed together, so each K/V
// row is fetched from memory once for all of them. State per query head: running max m, running
// denominator l and an unnormalised accumulator acc [head_dim]. For each step's scores s:
//   m' = max(m, max s);  c = exp(m - m');  l = c l + sum exp(s - m');  acc = c acc + sum exp(s -
//   m') v
// and at the end out = acc / l.
//
// Where head_dim % 8 == 0 (SmolLM2: 64) the group's heads run together, up to 3 at a time (4 on
// AVX-512; a group of 8 as two passes of 4), by the grouped kernels below; otherwise head by head.
// A narrow cache (f16, bf16, and q8_0/q4_0 in 32-value groups; K and V of one dtype) read by one
// token is widened (exactly) in registers by the grouped kernels, 8 values at a time; read by
// several tokens, on the head-by-head path, or in any other combination, each (block, kv head) is
// widened once into per-thread f32 rows for all of them (kv_row_format.h gives the formats).
// q8_0 K in 32-value groups is never widened: every path scores it in integers against the query
// rounded to q8_0 (kv_query_q8.h, avx2_q8_scores.h), 8 keys at a time with the keys in lanes.
// Per-channel q4_0 K neither: sealed blocks are scored in integers against the query folded into
// each block's scales (kv_channel_query.h, avx2_channel_scores.h), the tokens' own block from its
// exact f16 rows, on every path.
//
// The walk over the blocks here is shared with the AVX-512 set, which hands each softmax step of
// the grouped heads to avx512::token_step (attention_step.h: the same bits on 512-bit vectors).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ember/backend/cpu/attention_step.h"
#include "ember/backend/cpu/avx2_attention_group.h"
#include "ember/backend/cpu/avx2_attention_head.h"
#include "ember/backend/cpu/avx2_attention_step.h"
#include "ember/backend/cpu/avx2_channel_scores.h"
#include "ember/backend/cpu/avx2_kv_rows.h"
#include "ember/backend/cpu/avx2_q8_scores.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/kv_query_q8.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/aligned_vector.h"

namespace ember::cpu::avx2 {
namespace {

// Per-thread scratch that only grows: the hot path does not allocate after the first call.
struct AttentionScratch {
  std::vector<float> acc;          // [rows, hd_pad]: the segment's
  std::vector<float> scores;       // [group, step_pad]
  std::vector<float> tile_scores;  // [tokens, group, step_pad]: a two-phase tile's (StepPhase)
  std::vector<float> m, l;         // [rows]
  // The segments folded so far (fold_attention_state): [rows, hd_pad], [rows], [rows].
  std::vector<float> total_acc, total_m, total_l;
  AlignedVector<float> k, v;  // a step's narrow blocks widened: [step_keys, hd_pad]
  // The call's queries rounded to q8_0 blocks for integer scores (kv_query_q8.h): [tokens,
  // heads, hd / 32].
  std::vector<BlockQ8Act> q8;
};

// Every cache line of [p, p + bytes) into L1.
// Four lines an iteration: the loop's own instructions were most of the cost of a block's 32 (f16)
// prefetches.
EMBER_AVX2_INLINE void prefetch_span(const char* p, int64_t bytes) {
  int64_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    _mm_prefetch(p + i, _MM_HINT_T0);
    _mm_prefetch(p + i + 64, _MM_HINT_T0);
    _mm_prefetch(p + i + 128, _MM_HINT_T0);
    _mm_prefetch(p + i + 192, _MM_HINT_T0);
  }
  for (; i < bytes; i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
}

// Keys per online-softmax step: whole blocks, at least this many (kernels.h). The softmax update
// (max, exp, hsum, rescale of the accumulator) and the integer P V's per-step work (the weights'
// largest magnitude, two divisions per head and V group, the scales' gathers) are serial chains
// per head; one per 16-key block was a quarter of the block's work. Four blocks per step:
// BM_Attention (3 alternating runs, one thread) 512-token context f32 cache 49-51 -> 46-48 us,
// f16 64-80 -> 58-60 us. Eight (5 alternating runs, Xeon, medians at 8,192 keys): f16 541 -> 520
// us, q8_0 364 -> 349, q4_0 454 -> 432, q4_0 with K per channel 343 -> 312; at 512 keys 3-10%
// faster each (sixteen gave 1-3% more, with twice the widened scratch).
constexpr int64_t kSoftmaxStepKeys = kAttentionStepMinKeys;

// The blocks of one softmax step for one kv head: K and V rows of block b at k[b] / v[b] (f32 rows
// in the pool, or in the widened scratch), or at kb[b] / vb[b] (a narrow pool read as it is).
struct StepBlocks {
  static constexpr int64_t kMax = kSoftmaxStepKeys;  // enough for block_size >= 1
  const float* k[kMax];
  const float* v[kMax];
  const uint8_t* kb[kMax];
  const uint8_t* vb[kMax];
};

// How a call reads the pool's rows: f32 rows in place; narrow rows widened in registers by the
// grouped kernels (one token, K and V of one dtype that load_kv8 reads); or any rows widened once
// per step into the scratch.
// ChannelK: per-channel K read as it is (ChannelKRegion); V q4_0 read as it is too (q4_values),
// else widened into the scratch. (head_dim % 8 != 0 never has per-channel K: kv_channel_problem
// refuses it.)
enum class PoolRead { InPlace, Widened, F16, Bf16, Q8, Q4, ChannelK };

PoolRead pool_read(const PagedKv& kv, int group_kernel, int64_t nt) {
  const DType k = kv.k_dtype, v = kv.v_dtype;
  if (k == DType::F32 && v == DType::F32) return PoolRead::InPlace;
  if (group_kernel != 0 && kv.k_channel) return PoolRead::ChannelK;
  if (group_kernel == 0 || nt != 1 || k != v || kv.k_channel) return PoolRead::Widened;
  switch (k) {
    case DType::F16:
      return PoolRead::F16;
    case DType::BF16:
      return PoolRead::Bf16;
    case DType::Q8_0:
      return kv.head_dim % kQuantBlock == 0 ? PoolRead::Q8 : PoolRead::Widened;
    case DType::Q4_0:
      return kv.head_dim % kQuantBlock == 0 ? PoolRead::Q4 : PoolRead::Widened;
    default:
      return PoolRead::Widened;
  }
}

}  // namespace

// nt query tokens of one sequence: token u's heads at q + u * q_stride, its output at
// out + u * out_stride, its context [0, ctx0 + u). Only the query heads of kv heads
// [kv_head_begin, kv_head_end) are computed. The tokens walk the K/V blocks together, so each block
// is fetched into L1 once for all of them; every (token, head) row keeps its own softmax state and
// runs exactly the operations it would alone (softmax steps start at multiples of the step length,
// whatever the token), so results do not depend on nt. G: see token_step.
// Keys are walked in segments (attention_segment_keys), each row's softmax state folded into its
// total at every segment's start. `keys`: the keys [begin, end) walked; `partial` non-null (nt 1,
// `keys` one segment): the rows' unnormalised states go there ([rows][hd + 2]) instead of out.
struct KeyRange {
  int64_t begin = 0, end = INT64_MAX;
};
template <int G, bool kAvx512Steps>
EMBER_AVX2 void attention_tokens_group(const float* q, int64_t nt, int64_t q_stride,
                                       int64_t n_heads, const PagedKv& kv,
                                       const int32_t* block_table, int64_t ctx0,
                                       const AttentionScores& rules, float* out, int64_t out_stride,
                                       int64_t kv_head_begin, int64_t kv_head_end, KeyRange keys,
                                       float* partial) {
  thread_local AttentionScratch scratch;
  const int64_t hd = kv.head_dim, bs = kv.block_size, n_kv = kv.n_kv_heads;
  const int64_t group = n_heads / n_kv, rows = nt * group;
  // Every kv head of the call keeps its rows' states; all rows: [n_g, rows].
  const int64_t n_g = kv_head_end - kv_head_begin, all_rows = n_g * rows;
  const int64_t hd_pad = (hd + 7) / 8 * 8;
  const int64_t step_blocks = std::max<int64_t>(1, kSoftmaxStepKeys / bs);
  const int64_t step_keys = step_blocks * bs, step_pad = (step_keys + 7) / 8 * 8;
  const __m256i hd_mask = tail_mask(hd % 8);
  if (static_cast<int64_t>(scratch.acc.size()) < all_rows * hd_pad) {
    scratch.acc.resize(static_cast<size_t>(all_rows * hd_pad));
  }
  if (static_cast<int64_t>(scratch.scores.size()) < group * step_pad) {
    scratch.scores.resize(static_cast<size_t>(group * step_pad));
  }
  if (nt > 1 && static_cast<int64_t>(scratch.tile_scores.size()) < nt * group * step_pad) {
    scratch.tile_scores.resize(static_cast<size_t>(nt * group * step_pad));
  }
  if (static_cast<int64_t>(scratch.m.size()) < all_rows) {
    scratch.m.resize(static_cast<size_t>(all_rows));
    scratch.l.resize(static_cast<size_t>(all_rows));
    scratch.total_m.resize(static_cast<size_t>(all_rows));
    scratch.total_l.resize(static_cast<size_t>(all_rows));
  }
  if (static_cast<int64_t>(scratch.total_acc.size()) < all_rows * hd_pad) {
    scratch.total_acc.resize(static_cast<size_t>(all_rows * hd_pad));
  }
  const PoolRead read = pool_read(kv, G, nt);
  // q8_0 K is never widened: every read of it scores in integers (kv_query_q8.h), so a token's
  // scores do not depend on the path (one token or a tile, any ISA).
  const bool int8_keys = G > 0 && kv_scores_in_int8(kv.k_dtype, hd, kv.k_channel);
  // q8_0 V beside them is never widened either: P V in integers (kv_pv_q8.h) on every path.
  const bool int8_values = int8_keys && kv.v_dtype == DType::Q8_0;
  // q4_0 V is never widened by the grouped kernels, whatever K: P V in integers (kv_pv_q8.h).
  const bool q4_values = G > 0 && kv.v_dtype == DType::Q4_0 && hd % kQuantBlock == 0;
  const int64_t q8_heads = n_g * group, q8_groups = hd / kQuantBlock;
  if (int8_keys) {
    if (static_cast<int64_t>(scratch.q8.size()) < nt * q8_heads * q8_groups) {
      scratch.q8.resize(static_cast<size_t>(nt * q8_heads * q8_groups));
    }
    for (int64_t u = 0; u < nt; ++u) {
      avx2::quantize_activations(q + u * q_stride + kv_head_begin * group * hd, 1, q8_heads * hd,
                                 scratch.q8.data() + u * q8_heads * q8_groups);
    }
  }
  if ((read == PoolRead::Widened || read == PoolRead::ChannelK) &&
      static_cast<int64_t>(scratch.k.size()) < step_keys * hd_pad) {
    scratch.k.assign(static_cast<size_t>(step_keys * hd_pad), 0.0f);
    scratch.v.assign(static_cast<size_t>(step_keys * hd_pad), 0.0f);
  }
  float* scores = scratch.scores.data();
  const int64_t ctx_last = ctx0 + nt - 1;  // the longest context among the tokens
  const float scale = rules.scale;
  // Steps start at multiples of step_keys for every token; those wholly before the first token's
  // window are skipped (the first token's window starts earliest).
  const int64_t tile_first = rules.first_key(ctx0);
  const int64_t p_start = tile_first / step_keys * step_keys;
  // Blocks wholly before the window may have gone back to the pool (their table entries are -1):
  // a step that starts before the window reads the window's first block in their place, under
  // scores of -inf (weight exactly 0 on finite values).
  const auto block_of = [&](int64_t index) {
    return block_table[std::max(index, tile_first / bs)];
  };
  // Distance between a block's consecutive f32 rows: in the pool, or in the widened scratch.
  const int64_t row_stride = read == PoolRead::Widened ? hd_pad : hd;
  StepBlocks blocks;
  // Segments start at multiples of segment_keys, a multiple of step_keys.
  const int64_t segment_keys = attention_segment_keys(bs);
  const int64_t walk_begin = std::max(p_start, keys.begin);
  const int64_t walk_end = std::min(ctx_last, keys.end);
  const auto start_segment = [&] {
    std::fill(scratch.acc.begin(), scratch.acc.begin() + all_rows * hd_pad, 0.0f);
    std::fill(scratch.m.begin(), scratch.m.begin() + all_rows, -INFINITY);
    std::fill(scratch.l.begin(), scratch.l.begin() + all_rows, 0.0f);
  };
  const auto fold_segment = [&] {
    for (int64_t r = 0; r < all_rows; ++r) {
      fold_attention_state(scratch.total_acc.data() + r * hd_pad, &scratch.total_m[r],
                           &scratch.total_l[r], scratch.acc.data() + r * hd_pad, scratch.m[r],
                           scratch.l[r], hd);
    }
  };

  // Steps outside, kv heads inside: a block's rows of consecutive kv heads are adjacent in the pool
  // (head-major within a block), so the call reads one run per block of all its heads' rows
  // instead of a head's short run per block (1 KiB for SmolLM2 in q8_0), which memory serves at
  // a fraction of the rate of longer runs. Each head's operations are the same either way.
  start_segment();
  std::fill(scratch.total_acc.begin(), scratch.total_acc.begin() + all_rows * hd_pad, 0.0f);
  std::fill(scratch.total_m.begin(), scratch.total_m.begin() + all_rows, -INFINITY);
  std::fill(scratch.total_l.begin(), scratch.total_l.begin() + all_rows, 0.0f);
  for (int64_t p0 = walk_begin; p0 < walk_end; p0 += step_keys) {
    if (p0 % segment_keys == 0 && p0 > walk_begin) {
      fold_segment();
      start_segment();
    }
    // This step's blocks: each holds bs consecutive rows of hd values per kv head.
    const int64_t n_blocks = std::min(step_blocks, (ctx_last - p0 + bs - 1) / bs);
    // Per-channel K: the tokens' own block is the last of their last step, read from its exact
    // f16 rows (hd apart) instead of its region.
    const int64_t own_block = (ctx_last - 1) / bs;
    const int64_t exact_stride = p0 / bs + n_blocks - 1 == own_block ? hd : 0;
    // A tile over K and V rows both widened into the scratch: every token's scores and softmax,
    // then V's rows widened where K's were and every token's P V (StepPhase), each token's weights
    // kept apart in between: 32 KiB of f32 rows at a time for a 128-key step of SmolLM2, not 64.
    const bool two_phase =
        G > 0 && nt > 1 && read == PoolRead::Widened && !int8_keys && !int8_values && !q4_values;
    for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
      const int64_t head_row0 = (g - kv_head_begin) * rows;  // g's first row in the states
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t pb = p0 + b * bs;
        const int64_t first = kv.row_index(block_of(pb / bs), 0, g);
        // The next block sits anywhere in the pool: the hardware prefetcher cannot guess it, so
        // its rows for this head are requested now.
        if (pb + bs < ctx_last) {
          const int64_t next_rows = std::min(bs, ctx_last - pb - bs);
          const int64_t next = kv.row_index(block_of(pb / bs + 1), 0, g);
          prefetch_span(reinterpret_cast<const char*>(kv.k_row(next)), next_rows * kv.k_row_bytes);
          prefetch_span(reinterpret_cast<const char*>(kv.v_row(next)), next_rows * kv.v_row_bytes);
        }
        blocks.kb[b] = kv.k_row(first);
        blocks.vb[b] = kv.v_row(first);
        const int64_t n_rows = std::min(bs, ctx_last - pb);
        if (read == PoolRead::Widened) {
          float* kd = scratch.k.data() + b * bs * hd_pad;
          if (!int8_keys) {  // q8_0 K is read in place
            widen_kv_rows(blocks.kb[b], kv.k_dtype, kv.k_row_bytes, n_rows, hd, hd_pad, kd);
          }
          blocks.k[b] = kd;
        }
        if (read == PoolRead::ChannelK && pb / bs == own_block) {
          blocks.kb[b] = reinterpret_cast<const uint8_t*>(kv.k_exact_rows(block_of(pb / bs), g));
        }
        if ((read == PoolRead::Widened || read == PoolRead::ChannelK) && !int8_values &&
            !q4_values && !two_phase) {
          float* vd = scratch.v.data() + b * bs * hd_pad;
          widen_kv_rows(blocks.vb[b], kv.v_dtype, kv.v_row_bytes, n_rows, hd, hd_pad, vd);
          blocks.v[b] = vd;
        } else if (read == PoolRead::InPlace) {
          blocks.k[b] = reinterpret_cast<const float*>(blocks.kb[b]);
          blocks.v[b] = reinterpret_cast<const float*>(blocks.vb[b]);
        }
      }
      for (int64_t pass = 0; pass < (two_phase ? 2 : 1); ++pass) {
        if (pass == 1) {  // V's rows widened where K's were: the scores are done with them
          for (int64_t b = 0; b < n_blocks; ++b) {
            float* vd = scratch.k.data() + b * bs * hd_pad;
            widen_kv_rows(blocks.vb[b], kv.v_dtype, kv.v_row_bytes,
                          std::min(bs, ctx_last - p0 - b * bs), hd, hd_pad, vd);
            blocks.v[b] = vd;
          }
        }
        for (int64_t u = 0; u < nt; ++u) {
          const StepPhase phase = !two_phase  ? StepPhase::Whole
                                  : pass == 0 ? StepPhase::Softmax
                                              : StepPhase::Pv;
          float* step_scores_at =
              two_phase ? scratch.tile_scores.data() + u * group * step_pad : scores;
          const int64_t ctx_len = ctx0 + u;
          const StepRule rule{p0, rules.first_key(ctx_len), rules.softcap};
          if (p0 >= ctx_len || p0 + step_keys <= rule.first) continue;
          const int64_t n = std::min(step_keys, ctx_len - p0);
          const float* qg = q + u * q_stride + g * group * hd;  // the group's heads are consecutive
          const int64_t q8_row = u * q8_heads + (g - kv_head_begin) * group;
          const BlockQ8Act* qq = int8_keys ? scratch.q8.data() + q8_row * q8_groups : nullptr;
          const auto qq_head = [&](int64_t h) { return qq != nullptr ? qq + h * q8_groups : qq; };
          float* acc = scratch.acc.data() + (head_row0 + u * group) * hd_pad;
          float* m = scratch.m.data() + head_row0 + u * group;
          float* l = scratch.l.data() + head_row0 + u * group;
          // The step on this ISA's kernels (the same bits either way: attention_step.h), the
          // group's heads G at a time (a GQA group of 8 as two passes of 4: each head's operations
          // are its own, so the split changes no bit).
          const auto step = [&](const auto* const* kb, const auto* const* vb, int64_t k_stride,
                                int64_t v_stride) EMBER_AVX2_LAMBDA {
            if constexpr (G > 0) {
              for (int64_t h = 0; h < group; h += G) {
                // The G heads' scores: [G, step_pad] at h (two_phase: each token's own [group,
                // step_pad]).
                float* sc = step_scores_at + (two_phase ? h * step_pad : 0);
                if constexpr (kAvx512Steps) {
                  avx512::token_step<G>(qg + h * hd, qq_head(h), kb, vb, bs, n, k_stride, v_stride,
                                        hd, hd_pad, scale, rule, step_pad, sc, acc + h * hd_pad,
                                        m + h, l + h, phase);
                } else {
                  token_step<G>(qg + h * hd, qq_head(h), kb, vb, G, bs, n, k_stride, v_stride, hd,
                                hd_pad, hd_mask, scale, rule, step_pad, sc, acc + h * hd_pad, m + h,
                                l + h, phase);
                }
              }
            } else {
              token_step<G>(qg, qq, kb, vb, group, bs, n, k_stride, v_stride, hd, hd_pad, hd_mask,
                            scale, rule, step_pad, scores, acc, m, l);
            }
          };
          const auto narrow_step = [&](auto elem) EMBER_AVX2_LAMBDA {
            using Elem = decltype(elem);
            const Elem* kb[StepBlocks::kMax];
            const Elem* vb[StepBlocks::kMax];
            for (int64_t b = 0; b < n_blocks; ++b) {
              kb[b] = reinterpret_cast<const Elem*>(blocks.kb[b]);
              vb[b] = reinterpret_cast<const Elem*>(blocks.vb[b]);
            }
            const int64_t stride = kv.k_row_bytes / static_cast<int64_t>(sizeof(Elem));
            step(kb, vb, stride, stride);
          };
          if constexpr (G > 0) {
            switch (read) {
              case PoolRead::F16:
                narrow_step(uint16_t{});
                continue;
              case PoolRead::Bf16:
                narrow_step(Bf16{});
                continue;
              case PoolRead::Q8:
                narrow_step(BlockQ8_0{});
                continue;
              case PoolRead::Q4:
                narrow_step(BlockQ4_0{});
                continue;
              default:
                break;
            }
            // K's rows as the step reads them, then V's: q4_0 as it is, q8_0 as it is beside q8_0
            // K, else the f32 rows (in the pool or widened into the scratch).
            const auto with_v = [&](const auto* const* kb, int64_t k_stride) EMBER_AVX2_LAMBDA {
              if (q4_values) {
                const BlockQ4_0* vb[StepBlocks::kMax];
                for (int64_t b = 0; b < n_blocks; ++b) {
                  vb[b] = reinterpret_cast<const BlockQ4_0*>(blocks.vb[b]);
                }
                step(kb, vb, k_stride, kv.v_row_bytes / static_cast<int64_t>(sizeof(BlockQ4_0)));
              } else {
                step(kb, blocks.v, k_stride, read == PoolRead::ChannelK ? hd_pad : row_stride);
              }
            };
            if (read == PoolRead::ChannelK) {
              const ChannelKRegion* kb[StepBlocks::kMax];
              for (int64_t b = 0; b < n_blocks; ++b) {
                kb[b] = reinterpret_cast<const ChannelKRegion*>(blocks.kb[b]);
              }
              with_v(kb, exact_stride);
              continue;
            }
            if (int8_keys) {  // K read in place
              if (int8_values) {
                narrow_step(BlockQ8_0{});
                continue;
              }
              const BlockQ8_0* kb[StepBlocks::kMax];
              for (int64_t b = 0; b < n_blocks; ++b) {
                kb[b] = reinterpret_cast<const BlockQ8_0*>(blocks.kb[b]);
              }
              with_v(kb, kv.k_row_bytes / static_cast<int64_t>(sizeof(BlockQ8_0)));
              continue;
            }
            with_v(blocks.k, row_stride);
            continue;
          }
          step(blocks.k, blocks.v, row_stride, row_stride);
        }
      }
    }
  }
  if (partial != nullptr) {  // one token, one segment: its rows' states as they are
    for (int64_t r = 0; r < all_rows;
         ++r) {  // nt = 1: row r is query head kv_head_begin * group + r
      float* state = partial + r * (hd + 2);
      std::copy_n(scratch.acc.data() + r * hd_pad, hd, state);
      state[hd] = scratch.m[r];
      state[hd + 1] = scratch.l[r];
    }
    return;
  }
  fold_segment();
  for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
    const int64_t head_row0 = (g - kv_head_begin) * rows;
    for (int64_t u = 0; u < nt; ++u) {
      for (int64_t j = 0; j < group; ++j) {
        const float lj = scratch.total_l[head_row0 + u * group + j];
        const __m256 inv = _mm256_set1_ps(lj > 0.0f ? 1.0f / lj : 0.0f);
        const float* a = scratch.total_acc.data() + (head_row0 + u * group + j) * hd_pad;
        float* o = out + u * out_stride + (g * group + j) * hd;
        int64_t d = 0;
        for (; d + 8 <= hd; d += 8) {
          _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), inv));
        }
        if (d < hd) {
          _mm256_maskstore_ps(o + d, hd_mask, _mm256_mul_ps(_mm256_loadu_ps(a + d), inv));
        }
      }
    }
  }
}

namespace {

// The kernel for this GQA group size where head_dim % 8 == 0: its heads G at a time, G the largest
// of 3, 2, 1 (4, 3, 2, 1 on AVX-512, whose 32 registers hold 16 accumulators) that divides the
// group; head by head (G = 0) otherwise. Its steps on AVX-512 vectors where kAvx512Steps. Per
// (head, key) the grouped kernels keep the head-by-head kernel's accumulators, tree and order, so
// the choice of G changes no bit (KernelsAttention.Avx512StepsGiveTheAvx2Bits: groups of 4 to 8).
template <bool kAvx512Steps>
auto group_kernel(int64_t n_heads, const PagedKv& kv) {
  const int64_t group = n_heads / kv.n_kv_heads;
  if (kv.head_dim % 8 != 0) return attention_tokens_group<0, kAvx512Steps>;
  if constexpr (kAvx512Steps) {
    if (group % 4 == 0) return attention_tokens_group<4, true>;
  }
  return group % 3 == 0   ? attention_tokens_group<3, kAvx512Steps>
         : group % 2 == 0 ? attention_tokens_group<2, kAvx512Steps>
                          : attention_tokens_group<1, kAvx512Steps>;
}

template <bool kAvx512Steps>
EMBER_AVX2 void attention_tokens_on(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                                    const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                                    const AttentionScores& scores, float* out, int64_t out_stride,
                                    int64_t kv_head_begin, int64_t kv_head_end) {
  const auto run = group_kernel<kAvx512Steps>(n_heads, kv);
  if (!kv.k_channel) {
    return run(q, nt, q_stride, n_heads, kv, block_table, ctx0, scores, out, out_stride,
               kv_head_begin, kv_head_end, KeyRange{}, nullptr);
  }
  // Per-channel K: a token reads its own block's keys exact and earlier blocks' sealed, so the
  // tokens of one call must share a block (each token's result is the same bits either way).
  for (int64_t u = 0; u < nt;) {
    const int64_t block = (ctx0 + u - 1) / kv.block_size;
    int64_t e = u + 1;
    while (e < nt && (ctx0 + e - 1) / kv.block_size == block) ++e;
    run(q + u * q_stride, e - u, q_stride, n_heads, kv, block_table, ctx0 + u, scores,
        out + u * out_stride, out_stride, kv_head_begin, kv_head_end, KeyRange{}, nullptr);
    u = e;
  }
}

template <bool kAvx512Steps>
EMBER_AVX2 void attention_segment_on(const float* q, int64_t n_heads, const PagedKv& kv,
                                     const int32_t* block_table, int64_t ctx_len,
                                     const AttentionScores& scores, int64_t kv_head_begin,
                                     int64_t kv_head_end, int64_t segment, float* partial) {
  const int64_t keys = attention_segment_keys(kv.block_size);
  group_kernel<kAvx512Steps>(n_heads, kv)(q, 1, 0, n_heads, kv, block_table, ctx_len, scores,
                                          nullptr, 0, kv_head_begin, kv_head_end,
                                          KeyRange{segment * keys, (segment + 1) * keys}, partial);
}

}  // namespace

void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end) {
  attention_tokens_on<false>(q, nt, q_stride, n_heads, kv, block_table, ctx0, scores, out,
                             out_stride, kv_head_begin, kv_head_end);
}

void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment,
                       float* partial) {
  attention_segment_on<false>(q, n_heads, kv, block_table, ctx_len, scores, kv_head_begin,
                              kv_head_end, segment, partial);
}

}  // namespace ember::cpu::avx2

namespace ember::cpu::avx512 {

// The AVX2 walk over the blocks with the softmax steps on AVX-512 vectors (attention_step.h).
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end) {
  avx2::attention_tokens_on<true>(q, nt, q_stride, n_heads, kv, block_table, ctx0, scores, out,
                                  out_stride, kv_head_begin, kv_head_end);
}

void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment,
                       float* partial) {
  avx2::attention_segment_on<true>(q, n_heads, kv, block_table, ctx_len, scores, kv_head_begin,
                                   kv_head_end, segment, partial);
}

}  // namespace ember::cpu::avx512
