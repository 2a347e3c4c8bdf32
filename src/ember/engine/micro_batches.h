// Pipeline parallelism (--pp): a step's tokens cut into micro-batches of consecutive tokens, so
// that stage s runs micro-batch i while stage s + 1 runs micro-batch i - 1. A sequence may be cut
// between two micro-batches: its later part starts where the earlier one ended, and since every
// stage runs the micro-batches in order, its K/V of the earlier part is written before the later
// part's attention reads it.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/backend/batch.h"

namespace ember {

struct MicroBatch {
  Batch batch;  // finalized
  // For each of batch.logit_rows in order: its index in the whole step's logit_rows (the row
  // of the step's logits it fills).
  std::vector<int32_t> logit_index;
};

// Cuts `step` (finalized) into `parts` micro-batches of nearly equal token counts (fewer when the
// step has fewer tokens). Hidden-state rows are not cut: a step that wants them stays whole.
std::vector<MicroBatch> cut_micro_batches(const Batch& step, int64_t parts);

}  // namespace ember
