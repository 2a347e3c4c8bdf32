// CpuBackend::attention: the batch's tokens as tiles of consecutive tokens of one sequence, each
// tile's kv heads as work items over the threads; a decode step with too few of those for the
// threads splits each long context into segments (attention_segment, "flash decoding") and folds
// their states in order afterwards, the same bits as one call over the whole context.
#include <algorithm>
#include <cmath>

#include "ember/backend/cpu/cpu_backend.h"
#include "ember/backend/cpu/host_kv_storage.h"
#include "ember/backend/kv_row_format.h"

namespace ember::cpu {

namespace {
// Fewer (tile, kv head) items than this many per thread leave threads idle at the end of the
// step (SmolLM2: 3 kv heads on 2 threads): single tokens then split their contexts by segment.
constexpr int64_t kItemsPerThread = 4;
}  // namespace

void CpuBackend::attention_untimed(const KvStorage& kv, int64_t layer, const float* q,
                                   int64_t n_heads, const AttentionScores& scores,
                                   const Batch& batch, float* out) {
  const auto& cache = static_cast<const HostKvStorage&>(kv);
  const PagedKv view = cache.layer_view(layer);
  const int64_t T = batch.size(), qd = n_heads * view.head_dim;
  if (view.k_rotated) {
    // The cache holds H k: scores need H q ((H q) . (H k) = q . k).
    q_rotated_.resize(static_cast<size_t>(T * qd));
    for_token_rows(T, [&](int64_t b, int64_t e) {
      std::copy(q + b * qd, q + e * qd, q_rotated_.data() + b * qd);
      for (int64_t r = b * n_heads; r < e * n_heads; ++r) {
        kv_rotate(q_rotated_.data() + r * view.head_dim, view.head_dim);
      }
    });
    q = q_rotated_.data();
  }
  const auto table_of = [&](int64_t t) {
    return block_table_of(batch.sequences[static_cast<size_t>(batch.sequence_of[t])], kv);
  };
  // Work items are (query tile, kv head): the tokens of a tile read each K/V block once together;
  // splitting by kv head lets even a single decode token's heads run on several threads.
  // A tile is up to attention_tile_tokens() consecutive tokens of one sequence, which read each K/V
  // block once together.
  attention_tiles_.clear();
  const int64_t tile_tokens = attention_tile_tokens();
  for (int64_t t = 0; t < T;) {
    int64_t e = t + 1;
    while (e < T && e - t < tile_tokens && batch.sequence_of[e] == batch.sequence_of[t] &&
           batch.positions[e] == batch.positions[e - 1] + 1) {
      ++e;
    }
    attention_tiles_.push_back({t, e - t});
    t = e;
  }
  const int64_t n_kv = view.n_kv_heads;
  // Multiply-adds of the scores and of P V (each token over its context, every head).
  int64_t work = 0;
  for (const auto& [t, nt] : attention_tiles_) work += nt * (batch.positions[t] + nt);
  work *= 2 * n_heads * view.head_dim;
  if (threads_.size() > 1 && work >= kMinParallelWork &&
      static_cast<int64_t>(attention_tiles_.size()) * n_kv < kItemsPerThread * threads_.size() &&
      attention_by_segments(kv, view, q, n_heads, scores, batch, out)) {
    return;
  }
  const int64_t n_items = static_cast<int64_t>(attention_tiles_.size()) * n_kv;
  const auto tile = [&](int64_t item) {
    return attention_tiles_[attention_tiles_.size() - 1 - static_cast<size_t>(item / n_kv)];
  };
  // Items run last tile first: with causal attention the late tiles cost the most, and handing them
  // out first keeps the threads' finishing times close.
  parallel_for_work(work, n_items, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end;) {
      const int64_t g0 = i % n_kv, g1 = std::min(n_kv, g0 + (end - i));
      const auto [t, nt] = tile(i);
      // The next call's first K/V blocks start loading while this one computes.
      if (const int64_t next = i + (g1 - g0); next < end) {
        const auto [next_t, next_nt] = tile(next);
        prefetch_kv_context(view, table_of(next_t), batch.positions[next_t] + next_nt, next % n_kv);
      }
      attention_tokens(q + t * qd, nt, qd, n_heads, view, table_of(t), batch.positions[t] + 1,
                       scores, out + t * qd, qd, g0, g1);
      i += g1 - g0;
    }
  });
}

bool CpuBackend::attention_by_segments(const KvStorage& kv, const PagedKv& view, const float* q,
                                       int64_t n_heads, const AttentionScores& scores,
                                       const Batch& batch, float* out) {
  const int64_t n_kv = view.n_kv_heads, hd = view.head_dim, qd = n_heads * hd;
  const int64_t group = n_heads / n_kv, state = group * (hd + 2);
  const int64_t segment_keys = attention_segment_keys(view.block_size);
  // Items: (tile, kv heads, segment) for the single tokens whose keys span several segments,
  // (tile, kv head, -1: one whole call) for the rest; last tile first, as attention_untimed. A
  // context with segments enough for every thread twice over gives each segment all kv heads (a
  // block's rows of all heads are one run in memory: kernels.h), a shorter one a kv head each.
  attention_items_.clear();
  int64_t partials = 0;
  const auto threads = static_cast<int64_t>(threads_.size());
  for (size_t i = attention_tiles_.size(); i-- > 0;) {
    const auto [t, nt] = attention_tiles_[i];
    const int64_t ctx = batch.positions[static_cast<size_t>(t)] + 1;
    const int64_t first = scores.first_key(ctx) / segment_keys, last = (ctx - 1) / segment_keys;
    const int64_t span = last - first + 1 >= 2 * threads ? n_kv : 1;
    for (int64_t g = 0; g < n_kv; g += span) {
      if (nt != 1 || last == first) {
        for (int64_t h = g; h < g + span; ++h) {
          attention_items_.push_back({static_cast<int64_t>(i), h, h + 1, -1, 0});
        }
        continue;
      }
      for (int64_t s = first; s <= last; ++s, partials += span * state) {
        attention_items_.push_back({static_cast<int64_t>(i), g, g + span, s, partials});
      }
    }
  }
  if (partials == 0) return false;
  attention_partials_.resize(static_cast<size_t>(partials));
  const auto table_of = [&](int64_t t) {
    return block_table_of(batch.sequences[static_cast<size_t>(batch.sequence_of[t])], kv);
  };
  threads_.parallel_for(
      static_cast<int64_t>(attention_items_.size()), [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          const SegmentItem& item = attention_items_[static_cast<size_t>(i)];
          const auto [t, nt] = attention_tiles_[static_cast<size_t>(item.tile)];
          const int64_t ctx = batch.positions[static_cast<size_t>(t)] + 1;
          if (item.segment < 0) {
            attention_tokens(q + t * qd, nt, qd, n_heads, view, table_of(t), ctx, scores,
                             out + t * qd, qd, item.kv_head, item.kv_head + 1);
          } else {
            attention_segment(q + t * qd, n_heads, view, table_of(t), ctx, scores, item.kv_head,
                              item.kv_head_end, item.segment,
                              attention_partials_.data() + item.partial_at);
          }
        }
      });
  // Each split head: its segments' states folded in order, then normalised, as the kernels do.
  std::vector<float>& total = attention_total_;
  total.resize(static_cast<size_t>(hd));
  for (size_t i = 0; i < attention_items_.size();) {
    const SegmentItem& head = attention_items_[i];
    size_t e = i + 1;
    while (e < attention_items_.size() && attention_items_[e].segment >= 0 &&
           attention_items_[e].tile == head.tile && attention_items_[e].kv_head == head.kv_head) {
      ++e;
    }
    if (head.segment >= 0) {
      const int64_t t = attention_tiles_[static_cast<size_t>(head.tile)].first;
      // The query heads of kv heads [kv_head, kv_head_end), consecutive in the states.
      for (int64_t j = 0; j < (head.kv_head_end - head.kv_head) * group; ++j) {
        float m = -INFINITY, l = 0.0f;
        std::fill(total.begin(), total.end(), 0.0f);
        for (size_t k = i; k < e; ++k) {
          const float* s =
              attention_partials_.data() + attention_items_[k].partial_at + j * (hd + 2);
          fold_attention_state(total.data(), &m, &l, s, s[hd], s[hd + 1], hd);
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* o = out + t * qd + (head.kv_head * group + j) * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = total[static_cast<size_t>(d)] * inv;
      }
    }
    i = e;
  }
  return true;
}

}  // namespace ember::cpu
