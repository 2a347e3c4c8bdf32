// A model's KV cache: the backend storage(s) its layers write and read, and which storage holds
// each layer.
//
// Usually one KvStorage holds every layer, indexed by each sequence's block table. A model whose
// sliding-window layers are interleaved with layers that attend to their whole context (Gemma 2
// and 3) keeps the sliding layers apart, in a second storage with a pool of its own and indexed by
// each sequence's window block table (KvShape::window_table): the scheduler gives the blocks a
// window has passed back to that pool, so the sliding layers' memory stays bounded by the window
// while the global layers keep every position. Model code asks storage(layer) and
// storage_layer(layer) and never knows which case it runs in.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ember/backend/backend.h"

namespace ember {

class KvCache {
 public:
  // One storage of `shape` for every layer (`windowed` empty), or the layers with windowed[l] set
  // in a second storage of `window_blocks` blocks (shape's rows and dtypes) read through the
  // window tables, the others in one of `shape`'s blocks.
  KvCache(Backend& backend, const KvShape& shape, const std::vector<bool>& windowed = {},
          int64_t window_blocks = 0);

  KvStorage& storage(int64_t layer) { return *layers_[static_cast<size_t>(layer)].storage; }
  const KvStorage& storage(int64_t layer) const {
    return *layers_[static_cast<size_t>(layer)].storage;
  }
  // `layer`'s index among the layers of storage(layer).
  int64_t storage_layer(int64_t layer) const { return layers_[static_cast<size_t>(layer)].index; }

  // The storage of the global layers (of every layer when nothing is kept apart): the one whose
  // blocks the prefix cache and the offload tiers know.
  KvStorage& main() { return *main_; }
  const KvShape& shape() const { return main_->shape(); }
  // The sliding-window layers' storage, null when every layer is in main() (or none of these
  // layers slides: a pipeline stage of global layers only).
  const KvStorage* window() const { return window_.get(); }
  // K + V bytes of one token across every layer (both storages).
  int64_t bytes_per_token() const;
  // What both storages hold beside their blocks (KvStorage::side_bytes).
  int64_t side_bytes() const {
    return main_->side_bytes() + (window_ != nullptr ? window_->side_bytes() : 0);
  }

 private:
  struct LayerPlace {
    KvStorage* storage = nullptr;
    int64_t index = 0;
  };
  std::unique_ptr<KvStorage> main_;
  std::unique_ptr<KvStorage> window_;
  std::vector<LayerPlace> layers_;
};

}  // namespace ember
