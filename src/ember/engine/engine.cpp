#include "ember/engine/engine.h"

#include <algorithm>
#include <string>

#include "ember/core/error.h"

namespace ember {

namespace {

int64_t resolve_context(const ModelWeights& w, const EngineOptions& o) {
  int64_t model_max =
      w.config.max_position_embeddings > 0 ? w.config.max_position_embeddings : 4096;
  return o.max_context > 0 ? o.max_context : std::min<int64_t>(model_max, 4096);
}

KvShape make_kv_shape(const ModelWeights& w, const EngineOptions& o, int64_t context) {
  KvShape s;
  s.n_layers = w.config.n_layers;
  s.block_size = o.block_size;
  s.n_kv_heads = w.config.n_kv_heads;
  s.head_dim = w.config.head_dim;
  s.dtype = o.kv_dtype;
  int64_t per_seq = (context + o.block_size - 1) / o.block_size;
  s.n_blocks = o.kv_blocks > 0 ? o.kv_blocks : per_seq * std::max<int64_t>(1, o.max_sequences);
  return s;
}

}  // namespace

Engine::Engine(const ModelWeights& weights, const EngineOptions& options)
    : weights_(weights),
      max_context_(resolve_context(weights, options)),
      kv_storage_(weights.backend->allocate_kv(make_kv_shape(weights, options, max_context_))),
      kv_(kv_storage_->shape().n_blocks, kv_storage_->shape().block_size, options.prefix_caching),
      model_(weights) {}

std::span<const float> Engine::feed(Sequence& seq, std::span<const int32_t> tokens,
                                    bool all_logits) {
  FeedRequest request{&seq, tokens, all_logits};
  return feed(std::span<FeedRequest>(&request, 1));
}

std::span<const float> Engine::feed(std::span<FeedRequest> requests) {
  step_.clear();
  // Reserve every sequence's blocks first so a full pool fails before anything is written.
  for (const FeedRequest& r : requests) {
    Sequence& seq = *r.sequence;
    int64_t new_len = seq.n_cached + static_cast<int64_t>(r.tokens.size());
    if (new_len > max_context_) {
      throw Error("context full: " + std::to_string(new_len) + " tokens exceed the context of " +
                  std::to_string(max_context_) + " (raise --ctx)");
    }
    if (!kv_.reserve(seq.block_table, new_len)) {
      throw Error("KV cache exhausted: no free block for " + std::to_string(new_len) + " tokens");
    }
  }
  for (const FeedRequest& r : requests) {
    Sequence& seq = *r.sequence;
    int64_t first_row = static_cast<int64_t>(step_.tokens.size());
    int64_t n = static_cast<int64_t>(r.tokens.size());
    step_.tokens.insert(step_.tokens.end(), r.tokens.begin(), r.tokens.end());
    step_.sequences.push_back({seq.block_table.blocks.data(), seq.n_cached, n});
    if (n > 0 && r.wants_logits) {
      for (int64_t i = r.all_logits ? 0 : n - 1; i < n; ++i) {
        step_.logit_rows.push_back(static_cast<int32_t>(first_row + i));
      }
    }
  }
  step_.finalize();
  const std::span<const float> logits = model_.forward(step_, *kv_storage_);
  for (const FeedRequest& r : requests) {
    Sequence& seq = *r.sequence;
    seq.tokens.resize(static_cast<size_t>(seq.n_cached));  // drop anything not yet cached
    seq.tokens.insert(seq.tokens.end(), r.tokens.begin(), r.tokens.end());
    seq.n_cached += static_cast<int64_t>(r.tokens.size());
    kv_.commit(seq.block_table, seq.tokens);
  }
  return logits;
}

int64_t Engine::attach_cached_prefix(Sequence& seq, std::span<const int32_t> prompt) {
  int64_t n = kv_.match_prefix(seq.block_table, prompt);
  seq.tokens.assign(prompt.begin(), prompt.begin() + n);
  seq.n_cached = n;
  return n;
}

void Engine::truncate(Sequence& seq, int64_t n_tokens) {
  if (n_tokens >= seq.n_cached) return;
  kv_.truncate(seq.block_table, n_tokens);
  seq.n_cached = n_tokens;
  seq.tokens.resize(static_cast<size_t>(n_tokens));
}

void Engine::release(Sequence& seq) {
  kv_.release(seq.block_table);
  seq.n_cached = 0;
}

}  // namespace ember
