#include "ember/engine/model_runner.h"

#include <algorithm>
#include <string>

#include "ember/core/error.h"

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
  int64_t per_seq = (context + o.block_size - 1) / o.block_size;
  s.n_blocks = o.kv_blocks > 0 ? o.kv_blocks : per_seq * std::max<int64_t>(1, o.max_sequences);
  return s;
}

}  // namespace

std::string EngineOptions::kv_dtype_label() const {
  std::string label = dtype_name(kv_dtype);
  if (kv_dtype_of_v() != kv_dtype) label += std::string("/") + dtype_name(kv_dtype_of_v());
  if (kv_rotate) label += " rotated";
  return label;
}

ModelRunner::ModelRunner(const ModelWeights& weights, const EngineOptions& options)
    : weights_(weights),
      max_context_(resolve_context(weights, options)),
      kv_(weights.backend->allocate_kv(make_kv_shape(weights, options, max_context_))),
      model_(make_model(weights)) {}

std::span<const float> ModelRunner::run(Batch& batch) {
  batch.finalize();
  return model_->forward(batch, *kv_);
}

}  // namespace ember
