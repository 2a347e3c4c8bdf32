// One stage of a model under pipeline parallelism: consecutive layers (the first `n_layers % pp`
// stages take one more), renumbered from 0 in the stage's checkpoint, its config's n_layers the
// stage's and first_layer where they start in the model (so per-layer rules, e.g. which layers
// slide, still see the model's numbering). The stage's hidden states come from the previous
// stage and go to the next (ModelWeights::receive_hidden / send_hidden); the last stage's logits
// go to every stage, so every rank samples the same tokens.
#pragma once

#include "ember/model/checkpoint.h"
#include "ember/parallel/tensor_shard.h"

namespace ember::parallel {

struct PipelineSplit {
  int stage = 0;
  int stages = 1;
};

// The layers of `stage`: [begin, begin + count).
Range stage_layers(int64_t n_layers, PipelineSplit split);

// `full` cut to the stage's layers (every other tensor kept); throws ember::Error naming --pp when
// there are more stages than layers.
Checkpoint stage_checkpoint(const Checkpoint& full, PipelineSplit split);

}  // namespace ember::parallel
