#include "ember/parallel/pipeline_stage.h"

#include <map>
#include <string>

#include "ember/core/error.h"

namespace ember::parallel {

Range stage_layers(int64_t n_layers, PipelineSplit split) {
  const int64_t base = n_layers / split.stages, extra = n_layers % split.stages;
  const int64_t begin = split.stage * base + std::min<int64_t>(split.stage, extra);
  return {begin, base + (split.stage < extra ? 1 : 0)};
}

Checkpoint stage_checkpoint(const Checkpoint& full, PipelineSplit split) {
  if (split.stages <= 1) return full;
  const ModelConfig& c = full.config;
  if (split.stages > c.n_layers) {
    throw Error::invalid_request("--pp", "--pp " + std::to_string(split.stages) +
                                             " is more stages than the " +
                                             std::to_string(c.n_layers) + " layers");
  }
  if (full.format == CheckpointFormat::ConfigOnly) {
    throw Error::invalid_request("--pp",
                                 "--pp: --dummy weights are not split across ranks; "
                                 "write them to a file first (ember quantize)");
  }
  const Range layers = stage_layers(c.n_layers, split);
  Checkpoint ckpt = full;
  ckpt.config.n_layers = layers.count;
  ckpt.config.first_layer = c.first_layer + layers.begin;
  const std::string prefix = "model.layers.";
  std::map<std::string, StoredTensor> kept;
  for (auto& [name, tensor] : ckpt.tensors) {
    if (name.rfind(prefix, 0) != 0) {
      kept.emplace(name, tensor);
      continue;
    }
    const size_t dot = name.find('.', prefix.size());
    const int64_t layer = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
    if (layer < layers.begin || layer >= layers.begin + layers.count) continue;
    const std::string renamed = prefix + std::to_string(layer - layers.begin) + name.substr(dot);
    StoredTensor t = tensor;
    t.view.name = renamed;
    kept.emplace(renamed, std::move(t));
  }
  ckpt.tensors = std::move(kept);
  return ckpt;
}

}  // namespace ember::parallel
