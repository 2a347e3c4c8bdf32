#include "ember/backend/kv_cache.h"

#include <algorithm>

#include "ember/core/error.h"

namespace ember {

KvCache::KvCache(Backend& backend, const KvShape& shape, const std::vector<bool>& windowed,
                 int64_t window_blocks) {
  const auto n_window = static_cast<int64_t>(std::count(windowed.begin(), windowed.end(), true));
  if (!windowed.empty() && static_cast<int64_t>(windowed.size()) != shape.n_layers) {
    throw Error("KV cache: a window flag per layer is needed");
  }
  KvShape main_shape = shape;
  main_shape.n_layers = shape.n_layers - n_window;
  main_shape.window_table = false;
  main_ = backend.allocate_kv(main_shape);
  if (n_window > 0) {
    KvShape window_shape = shape;
    window_shape.n_layers = n_window;
    window_shape.n_blocks = window_blocks;
    window_shape.window_table = true;
    window_ = backend.allocate_kv(window_shape);
  }
  int64_t next_main = 0, next_window = 0;
  for (int64_t l = 0; l < shape.n_layers; ++l) {
    const bool apart = n_window > 0 && windowed[static_cast<size_t>(l)];
    layers_.push_back(apart ? LayerPlace{window_.get(), next_window++}
                            : LayerPlace{main_.get(), next_main++});
  }
}

int64_t KvCache::bytes_per_token() const {
  return main_->shape().bytes_per_token() + (window_ ? window_->shape().bytes_per_token() : 0);
}

}  // namespace ember
