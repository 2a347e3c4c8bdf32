// A test harness over ModelRunner + KvBlockManager that feeds chosen tokens of chosen sequences
// through one forward step and returns their logits: what the forward-pass tests need to compare
// prefill with decode, chunked with whole, cached with recomputed. The product's only loop is
// LLMEngine (it schedules; tests here pick the batches themselves).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ember/backend/batch.h"
#include "ember/core/error.h"
#include "ember/engine/model_runner.h"
#include "ember/engine/sequence.h"
#include "ember/kv/kv_block_manager.h"

namespace ember::test {

struct FeedRequest {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;  // appended to sequence->tokens and run
  bool all_logits = false;          // logits for every new token, else only for the last
  bool wants_logits = true;         // false: no logits at all
};

class StepEngine {
 public:
  StepEngine(const ModelWeights& weights, const EngineOptions& options)
      : runner_(weights, options),
        kv_(runner_.kv_shape().n_blocks, runner_.kv_shape().block_size, options.prefix_caching) {
    if (runner_.window_layers_window() > 0) {  // Gemma's sliding layers in a pool of their own
      window_kv_.emplace(runner_.window_pool_blocks(), runner_.kv_shape().block_size,
                         options.prefix_caching);
    }
  }

  std::span<const float> feed(Sequence& seq, std::span<const int32_t> tokens,
                              bool all_logits = false) {
    FeedRequest request{&seq, tokens, all_logits};
    return feed(std::span<FeedRequest>(&request, 1));
  }

  std::span<const float> feed(std::span<FeedRequest> requests) {
    batch_.clear();
    for (const FeedRequest& r : requests) {
      Sequence& seq = *r.sequence;
      const int64_t new_len = seq.n_cached + static_cast<int64_t>(r.tokens.size());
      if (new_len > runner_.max_context()) throw Error("context full");
      if (!kv_.reserve(seq.block_table, new_len)) throw Error("KV cache exhausted");
      if (window_kv_ && !window_kv_->reserve(seq.window_table, new_len)) {
        throw Error("window KV cache exhausted");
      }
    }
    for (const FeedRequest& r : requests) {
      Sequence& seq = *r.sequence;
      const auto first_row = static_cast<int32_t>(batch_.tokens.size());
      const auto n = static_cast<int64_t>(r.tokens.size());
      batch_.tokens.insert(batch_.tokens.end(), r.tokens.begin(), r.tokens.end());
      batch_.sequences.push_back(
          {seq.block_table.blocks.data(), seq.n_cached, n, seq.window_table.blocks.data()});
      if (n > 0 && r.wants_logits) {
        for (int64_t i = r.all_logits ? 0 : n - 1; i < n; ++i)
          batch_.logit_rows.push_back(first_row + static_cast<int32_t>(i));
      }
    }
    const std::span<const float> logits = runner_.run(batch_);
    for (const FeedRequest& r : requests) {
      Sequence& seq = *r.sequence;
      seq.tokens.resize(static_cast<size_t>(seq.n_cached));  // drop anything not yet cached
      seq.tokens.insert(seq.tokens.end(), r.tokens.begin(), r.tokens.end());
      seq.n_cached += static_cast<int64_t>(r.tokens.size());
      kv_.commit(seq.block_table, seq.tokens);
      if (window_kv_) {  // as the scheduler does: blocks the window has passed go back
        window_kv_->commit(seq.window_table, seq.tokens);
        window_kv_->release_before(seq.window_table,
                                   seq.n_cached - runner_.window_layers_window() + 1);
      }
    }
    return logits;
  }

  // Attaches the prefix-cached blocks of `prompt` to a fresh sequence; returns the tokens cached.
  int64_t attach_cached_prefix(Sequence& seq, std::span<const int32_t> prompt) {
    int64_t n = kv_.match_prefix(seq.block_table, prompt);
    if (window_kv_) {
      n = window_kv_->match_window(seq.window_table, prompt, n, runner_.window_layers_window());
      kv_.truncate(seq.block_table, n);
    }
    seq.tokens.assign(prompt.begin(), prompt.begin() + n);
    seq.n_cached = n;
    return n;
  }

  // Logits of every position of `ids`, [ids.size(), vocab]: one prefill of the first n_prefill
  // (every row), then one token per step; the cache is given back after.
  std::vector<float> prefill_then_decode(std::span<const int32_t> ids, size_t n_prefill) {
    Sequence seq;
    std::vector<float> out;
    std::span<const float> z = feed(seq, ids.first(n_prefill), /*all_logits=*/true);
    out.insert(out.end(), z.begin(), z.end());
    for (size_t i = n_prefill; i < ids.size(); ++i) {
      z = feed(seq, ids.subspan(i, 1));
      out.insert(out.end(), z.begin(), z.end());
    }
    release(seq);
    return out;
  }

  void release(Sequence& seq) {
    kv_.release(seq.block_table);
    if (window_kv_) window_kv_->release(seq.window_table);
    seq.n_cached = 0;
  }

  const KvBlockManager& kv() const { return kv_; }
  int64_t max_context() const { return runner_.max_context(); }
  int64_t vocab_size() const { return runner_.vocab_size(); }
  const ModelRunner& runner() const { return runner_; }

 private:
  ModelRunner runner_;
  KvBlockManager kv_;
  std::optional<KvBlockManager> window_kv_;
  Batch batch_;
};

// The logits of `prompt` (a row per token when `all_logits`, else the last token's) and then of
// `decode` greedy steps of one token, a row each, on a fresh engine over `weights`.
inline std::vector<std::vector<float>> greedy_step_logits(const ModelWeights& weights,
                                                          std::span<const int32_t> prompt,
                                                          int decode, bool all_logits) {
  EngineOptions eo;
  eo.max_context = 64;
  StepEngine engine(weights, eo);
  const auto V = static_cast<size_t>(weights.config.vocab_size);
  std::vector<std::vector<float>> rows;
  Sequence seq;
  std::span<const float> z = engine.feed(seq, prompt, all_logits);
  for (size_t r = 0; r < z.size() / V; ++r)
    rows.emplace_back(z.begin() + r * V, z.begin() + (r + 1) * V);
  for (int i = 0; i < decode; ++i) {
    const auto& last = rows.back();
    const auto next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    z = engine.feed(seq, std::span<const int32_t>(&next, 1));
    rows.emplace_back(z.begin(), z.end());
  }
  engine.release(seq);
  return rows;
}

}  // namespace ember::test
