#include "ember/engine/model_runner.h"

#include <algorithm>
#include <string>

#include "ember/core/error.h"
#include "ember/engine/micro_batches.h"

namespace ember {

namespace {

int64_t resolve_context(const ModelWeights& w, const EngineOptions& o) {
  int64_t model_max =
      w.config.max_position_embeddings > 0 ? w.config.max_position_embeddings : 4096;
  const int64_t context = o.max_context > 0 ? o.max_context : std::min<int64_t>(model_max, 4096);
  if (w.config.learned_positions && context > model_max) {
    throw Error("context " + std::to_string(context) + " is longer than the model's " +
                std::to_string(model_max) + " learned positions");
  }
  return context;
}

KvShape make_kv_shape(const ModelWeights& w, const EngineOptions& o, int64_t context) {
  KvShape s;
  s.n_layers = w.config.n_layers;
  s.block_size = o.block_size;
  s.n_kv_heads = w.config.n_kv_heads;
  s.head_dim = w.config.head_dim;
  s.k_dtype = o.kv_dtype;
  s.v_dtype = o.kv_dtype_of_v();
  s.rotate_k = o.kv_rotate;
  s.k_channel_scales = o.k_channel_scales();
  if (const std::string problem = kv_channel_problem(s.k_dtype, s.head_dim, s.block_size);
      s.k_channel_scales && !problem.empty()) {
    if (o.kv_k_channel.has_value()) throw Error(problem);
    s.k_channel_scales = false;  // auto: q4_0's groups where per-channel blocks cannot be
  }
  int64_t per_seq = (context + o.block_size - 1) / o.block_size;
  s.n_blocks = o.kv_blocks > 0 ? o.kv_blocks : per_seq * std::max<int64_t>(1, o.max_sequences);
  return s;
}

// Gemma 2/3: sliding-window layers interleaved with global ones get a storage of their own
// (kv_cache.h) unless the options keep every layer together: offload tiers (they copy whole blocks
// of the one pool).
bool keeps_window_layers_apart(const ModelWeights& w, const EngineOptions& o) {
  const ModelConfig& c = w.config;
  return c.sliding_window > 0 && c.sliding_window_pattern > 1 && o.release_window_blocks &&
         !o.kv_tiers.enabled();
}

// Blocks the window layers' pool needs so that it never runs short before the main pool: each
// sequence keeps its window (plus guesses not yet verified) and a partial block at each end, and
// one step writes at most max_step_tokens new positions in all. Never more than the main pool.
int64_t window_pool_wanted(const EngineOptions& o, int64_t window) {
  const int64_t bs = o.block_size;
  const int64_t per_sequence = (window + o.max_draft_tokens + bs - 1) / bs + 2;
  return std::max<int64_t>(1, o.max_sequences) * per_sequence + (o.max_step_tokens + bs - 1) / bs;
}

int64_t window_pool_size(const EngineOptions& o, const KvShape& main, int64_t window) {
  return std::min(main.n_blocks, window_pool_wanted(o, window));
}

std::vector<bool> windowed_layers(const ModelConfig& c) {
  std::vector<bool> windowed;
  for (int64_t l = 0; l < c.n_layers; ++l) windowed.push_back(c.layer_window(l) > 0);
  return windowed;
}

}  // namespace

int64_t default_kv_block_size(const EngineOptions& options) {
  return options.k_channel_scales() ? kChannelKBlockTokens : 16;
}

KvPoolCosts kv_pool_costs(const ModelWeights& weights, const EngineOptions& options) {
  KvShape shape = make_kv_shape(weights, options, 1);
  KvPoolCosts costs;
  if (!keeps_window_layers_apart(weights, options)) {
    costs.block_bytes = shape.bytes_per_block();
    costs.exact_block_bytes = shape.k_exact_bytes_per_block();
    return costs;
  }
  const std::vector<bool> windowed = windowed_layers(weights.config);
  const auto n_window = static_cast<int64_t>(std::count(windowed.begin(), windowed.end(), true));
  shape.n_layers = weights.config.n_layers - n_window;
  costs.block_bytes = shape.bytes_per_block();
  costs.exact_block_bytes = shape.k_exact_bytes_per_block();
  shape.n_layers = n_window;
  costs.window_block_bytes = shape.bytes_per_block();
  costs.window_exact_block_bytes = shape.k_exact_bytes_per_block();
  costs.window_blocks = window_pool_wanted(options, weights.config.sliding_window);
  return costs;
}

int64_t KvPoolCosts::exact_rows_bytes(int64_t n) const {
  return kv_channel_exact_blocks_cap(n) * (exact_block_bytes + draft_exact_block_bytes) +
         (window_exact_block_bytes > 0
              ? kv_channel_exact_blocks_cap(window_blocks) * window_exact_block_bytes
              : 0);
}

int64_t KvPoolCosts::bytes_for(int64_t n) const {
  return n * (block_bytes + draft_block_bytes) + window_blocks * window_block_bytes +
         exact_rows_bytes(n) + draft_weight_bytes;
}

int64_t KvPoolCosts::blocks_within(int64_t budget) const {
  if (bytes_for(0) > budget) return 0;
  // bytes_for grows with n: the last n that fits, by bisection.
  int64_t lo = 0, hi = budget / std::max<int64_t>(1, block_bytes + draft_block_bytes) + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (bytes_for(mid) <= budget ? lo : hi) = mid;
  }
  return lo;
}

std::string EngineOptions::kv_dtype_label() const {
  // As KvShape::dtype_label: "q4_0c/q4_0" for per-channel K.
  std::string label = dtype_name(kv_dtype);
  if (k_channel_scales()) label.push_back('c');
  if (kv_dtype_of_v() != kv_dtype || k_channel_scales()) {
    label.push_back('/');
    label.append(dtype_name(kv_dtype_of_v()));
  }
  if (kv_rotate) label.append(" rotated");
  return label;
}

ModelRunner::ModelRunner(const ModelWeights& weights, const EngineOptions& options)
    : weights_(weights),
      micro_batches_(std::max<int64_t>(1, options.pipeline_micro_batches)),
      steps_in_flight_(weights.start_logits ? std::clamp<int64_t>(options.pipeline_in_flight, 1,
                                                                  weights.pipeline_stages)
                                            : 1),
      max_context_(resolve_context(weights, options)),
      window_(keeps_window_layers_apart(weights, options) ? weights.config.sliding_window : 0),
      window_blocks_(
          window_ > 0
              ? window_pool_size(options, make_kv_shape(weights, options, max_context_), window_)
              : 0),
      kv_(*weights.backend, make_kv_shape(weights, options, max_context_),
          window_ > 0 ? windowed_layers(weights.config) : std::vector<bool>{}, window_blocks_),
      model_(make_model(weights)) {}

void ModelRunner::launch(Batch& batch) {
  if (in_flight() >= steps_in_flight_) {
    throw Error("internal: a step launched with " + std::to_string(in_flight()) +
                " steps in flight already");
  }
  batch.finalize();
  StepLogits step;
  if (!weights_.start_logits) {
    step.forward = model_->forward(batch, kv_);
  } else {
    if (!spare_.empty()) {
      step.handed = std::move(spare_.back());
      spare_.pop_back();
    }
    launch_pipeline_stage(batch, step.handed);
  }
  in_flight_.push_back(std::move(step));
}

std::span<const float> ModelRunner::collect() {
  if (in_flight_.empty()) throw Error("internal: logits collected with no step in flight");
  if (collected_.handed.capacity() > 0) spare_.push_back(std::move(collected_.handed));
  collected_ = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (!weights_.start_logits) return collected_.forward;
  weights_.finish_logits();  // the oldest step's hand-off: this one's
  return collected_.handed;
}

void ModelRunner::launch_pipeline_stage(const Batch& step, std::vector<float>& step_logits) {
  const int64_t V = weights_.config.vocab_size;
  const auto R = static_cast<int64_t>(step.logit_rows.size());
  step_logits.resize(static_cast<size_t>(R * V));
  // The hand-offs between stages are point-to-point: this stage starts micro-batch i + 1 as soon
  // as it has handed i on, while the next stage runs i.
  const int64_t parts = std::min(micro_batches_, step.size() / kMinMicroBatchTokens);
  for (const MicroBatch& mb : cut_micro_batches(step, parts)) {
    const std::span<const float> logits = model_->forward(mb.batch, kv_);  // none before the last
    if (logits.empty()) continue;
    for (size_t i = 0; i < mb.logit_index.size(); ++i) {
      std::copy_n(logits.begin() + static_cast<int64_t>(i) * V, V,
                  step_logits.begin() + int64_t{mb.logit_index[i]} * V);
    }
  }
  weights_.start_logits(step_logits.data(), R * V);
}

}  // namespace ember
