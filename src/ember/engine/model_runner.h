// The model and its KV cache, ready to run steps: the KV storage (allocated by the model's
// backend for the engine's cache shape) and the family's forward pass. run() executes one Batch;
// which blocks a batch may write is the scheduler's business (it reserved them), so the runner
// keeps no books.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/backend/kv_cache.h"
#include "ember/kv/kv_tier_store.h"
#include "ember/model/model.h"
#include "ember/model/weights.h"

namespace ember {

// The KV cache and context an engine is built for.
struct EngineOptions {
  int64_t max_context = 0;    // per sequence; 0: min(model's max positions, 4096)
  int64_t max_sequences = 1;  // sizes the KV pool together with max_context
  int64_t block_size = 16;    // tokens per KV block
  int64_t kv_blocks = 0;      // 0: enough for max_sequences x max_context
  bool prefix_caching = false;
  // KV cache storage (backend/kv_row_format.h): f32, f16, bf16, q8_0 or q4_0 for K and V, or V
  // apart from K when kv_dtype_v is set.
  DType kv_dtype = DType::F32;
  std::optional<DType> kv_dtype_v;
  bool kv_rotate = false;  // store K rotated by a Hadamard matrix (KvShape::rotate_k)
  // A q4_0 K cache with per-channel scales (KvShape::k_channel_scales) or q4_0's per-token groups;
  // unset: per channel wherever the K cache is q4_0 and the shape allows it.
  std::optional<bool> kv_k_channel;
  bool k_channel_scales() const { return kv_k_channel.value_or(kv_dtype == DType::Q4_0); }
  // Offload tiers for prefix blocks that leave the pool (kv/kv_tier_store.h); need prefix_caching.
  KvTierOptions kv_tiers;
  DType kv_dtype_of_v() const { return kv_dtype_v.value_or(kv_dtype); }
  // "q8_0", or "q8_0/f16" when K and V differ.
  std::string kv_dtype_label() const;
  // Models whose every layer has a sliding window: blocks the window has passed go back to the
  // pool. Models whose sliding layers are interleaved with global ones (Gemma 2/3): the sliding
  // layers' K/V in a pool of their own (backend/kv_cache.h) whose passed blocks go back. False
  // keeps every block of every layer in one pool, for tests that compare the two.
  bool release_window_blocks = true;
  // Tokens one step writes at most (the scheduler's max_batched_tokens), and the most speculative
  // guesses a sequence carries: with the window pool above, they size it.
  int64_t max_step_tokens = 512;
  int64_t max_draft_tokens = 0;
  // --pp: a step of at least 2 x kMinMicroBatchTokens tokens is cut into up to this many
  // micro-batches so that the stages overlap (micro_batches.h); 1 runs each step whole.
  int64_t pipeline_micro_batches = 1;
  // --pp: how many steps may be in flight at once (ModelRunner::launch): with the stages' count,
  // each stage runs a later step while the next stage runs an earlier one; 1 runs the steps one
  // after another through every stage.
  int64_t pipeline_in_flight = 1;
};

// The tokens per KV block the commands use when --block-size is not given: 64 for a per-channel
// q4_0 K cache (EngineOptions::k_channel_scales), 16 for every other cache. A per-channel block
// pays its query fold (the query times the block's channel scales, kv_channel_query.h) once per
// block, and its channel scales span its tokens: at 64 tokens the fold is a quarter as often and a
// block's rows of all kv heads are runs of ~7 KiB (SmolLM2) instead of ~2, while the error stays
// where it was (mean KL against the f16 cache on the SmolLM2-shaped dummy 3.09e-3 -> 3.11e-3,
// stories260K 2.4e-3 -> 2.9e-3). Float and q8_0 caches gain nothing from longer blocks (f16 loses a
// few percent: each block's rows are requested as one burst) and keep prefix caching's 16-token
// granularity.
int64_t default_kv_block_size(const EngineOptions& options);

// What a KV pool of `options` costs for `weights` before it is allocated (serve sizes it from a
// memory budget): bytes per block of the main pool and, when the sliding-window layers are kept
// apart, of their pool and its block count at most (it never exceeds the main pool's).
struct KvPoolCosts {
  int64_t block_bytes = 0;
  int64_t window_block_bytes = 0;
  int64_t window_blocks = 0;
  // Per-channel K (KvShape::k_exact_bytes_per_block): one block's exact rows, kept beside the pool
  // for the blocks being written and up to kv_channel_exact_blocks_cap(n) others.
  int64_t exact_block_bytes = 0;
  int64_t window_exact_block_bytes = 0;
  // A draft model's K/V in each block of the main pool (draft_proposer.h: its storage has as many
  // blocks) and, when the draft is a copy of its own (not an early exit of the model), its weights;
  // the caller that knows the draft sets them (add_draft_pool_costs).
  int64_t draft_block_bytes = 0;
  int64_t draft_exact_block_bytes = 0;
  int64_t draft_weight_bytes = 0;

  // What a main pool of n blocks costs beside the model's weights: both pools, the draft's pool
  // and weights, and the exact rows at their bound (the blocks written in the last two steps may
  // go past it by a step's blocks).
  int64_t bytes_for(int64_t n_blocks) const;
  // The exact rows' part of bytes_for(n_blocks): the main pool's, the draft's and the window
  // pool's at their bounds.
  int64_t exact_rows_bytes(int64_t n_blocks) const;
  // The most blocks n >= 0 with bytes_for(n) <= budget.
  int64_t blocks_within(int64_t budget) const;
};
KvPoolCosts kv_pool_costs(const ModelWeights& weights, const EngineOptions& options);

class ModelRunner {
 public:
  ModelRunner(const ModelWeights& weights, const EngineOptions& options);

  // Runs one step (finalizing the batch); returns logits [batch.logit_rows.size(), vocab] in host
  // memory, valid until the next call.
  std::span<const float> run(Batch& batch) {
    launch(batch);
    return collect();
  }
  // A step in two halves, so that under --pp a stage runs later steps while the later stages
  // still run earlier ones: launch runs this rank's part of the step (finalizing the batch; the
  // last stage then starts handing its logits to every stage) and collect returns the logits of
  // the oldest step launched and not yet collected, valid until the next collect. At most
  // steps_in_flight() steps may be launched and not collected. Every rank launches and collects
  // the same steps in the same order.
  void launch(Batch& batch);
  std::span<const float> collect();
  int64_t in_flight() const { return static_cast<int64_t>(in_flight_.size()); }
  // --pp with EngineOptions::pipeline_in_flight: up to that many (at most the stages' count, since
  // more would only queue); 1 otherwise.
  int64_t steps_in_flight() const { return steps_in_flight_; }
  // A micro-batch holds at least this many tokens: a smaller step (decode) stays whole, since each
  // micro-batch reads the stage's weights again.
  static constexpr int64_t kMinMicroBatchTokens = 16;

  const ModelWeights& weights() const { return weights_; }
  // The storage of every layer, or of the global layers when the sliding-window layers have their
  // own (window_kv_shape()): the pool the scheduler's main block manager keeps books of.
  const KvShape& kv_shape() const { return kv_.shape(); }
  KvStorage& kv_storage() { return kv_.main(); }
  // kv_shape() as if every layer were in it (the per-token formula a trace compares with).
  KvShape kv_shape_of_every_layer() const {
    KvShape s = kv_.shape();
    s.n_layers = weights_.config.n_layers;
    s.window_table = false;
    return s;
  }
  // When the sliding-window layers are kept apart (kv_cache.h): their window and the blocks of
  // their pool, which the scheduler's window block manager keeps books of; 0 otherwise.
  int64_t window_layers_window() const { return window_; }
  int64_t window_pool_blocks() const { return window_blocks_; }
  // K + V bytes of one token in every layer, and of one block of the window layers' pool.
  int64_t kv_bytes_per_token() const { return kv_.bytes_per_token(); }
  // Bytes the KV storages hold beside the pool (per-channel K's exact rows).
  int64_t kv_side_bytes() const { return kv_.side_bytes(); }
  int64_t window_kv_bytes_per_block() const {
    return kv_.window() != nullptr ? kv_.window()->shape().bytes_per_block() : 0;
  }
  int64_t max_context() const { return max_context_; }
  int64_t vocab_size() const { return weights_.config.vocab_size; }
  int n_threads() const { return weights_.backend->info().threads; }
  // Tokens routed to each expert so far, [n_layers * n_experts]; empty for dense models.
  std::span<const int64_t> expert_load() const { return model_->expert_load(); }
  // The last run's batch.hidden_rows hidden states (see Model::hidden_states).
  std::span<const float> hidden_states() const { return model_->hidden_states(); }
  // Shows the following steps' forward passes to `observer` (ember trace; null: none).
  void set_observer(ForwardObserver* observer) { model_->set_observer(observer); }

 private:
  // --pp: the step in micro-batches through this rank's stage into `logits` ([logit rows, vocab]
  // of the whole step, on the last stage), whose hand-off to every stage then starts.
  void launch_pipeline_stage(const Batch& step, std::vector<float>& logits);

  // A launched step's logits: the forward's own (one process) or the whole step's, which under
  // --pp the last stage sends from and every other stage receives into.
  struct StepLogits {
    std::span<const float> forward;
    std::vector<float> handed;
  };

  const ModelWeights& weights_;
  int64_t micro_batches_ = 1;
  int64_t steps_in_flight_ = 1;
  std::deque<StepLogits> in_flight_;       // launched, oldest first
  StepLogits collected_;                   // the last collect's (its span points into it)
  std::vector<std::vector<float>> spare_;  // buffers of collected steps, for the next launches
  int64_t max_context_;
  int64_t window_ = 0;
  int64_t window_blocks_ = 0;
  KvCache kv_;
  std::unique_ptr<Model> model_;
};

}  // namespace ember
