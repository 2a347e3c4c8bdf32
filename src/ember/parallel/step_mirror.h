// `mpirun -np N ember serve ... --tp/--pp`: rank 0 runs the HTTP server, the scheduler and the
// sampling; every other rank holds its part of the model and its own KV pool (the same block
// count as rank 0's) and runs, in step, the batches rank 0 sends it: each step's tokens, the
// sequences' positions and block tables (so every rank's K/V sits in the same blocks) and the
// rows whose logits and hidden states are wanted. The forward pass's own collectives (the
// all-reduces, the stages' hand-offs, the logits' gather) then run as they do for `run`. When the
// server has stopped, rank 0 sends a stop and the followers return.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/backend/batch.h"

namespace ember::parallel {

// Rank 0: the step about to run (before Batch::finalize) to every other rank; `block_size` says
// how far each sequence's block tables reach (the blocks of positions [0, start + n_tokens)).
void send_step(const Batch& batch, int64_t block_size);
// Rank 0: tells the followers the server stopped.
void send_stop();
// Other ranks: waits (as long as it takes, without holding a core) for rank 0's next step and
// fills `batch`, its block tables kept in `tables`; false when rank 0 sent the stop.
bool receive_step(Batch& batch, std::vector<int32_t>& tables);
// The step as the int32s sent, and back (`tables` keeps the block tables the batch points into;
// throws ember::Error for a malformed message).
std::vector<int32_t> encode_step(const Batch& batch, int64_t block_size);
void decode_step(const std::vector<int32_t>& in, Batch& batch, std::vector<int32_t>& tables);
// Rank 0's `value` on every rank (what a rank decided from its own machine, such as the KV
// pool's size from its free memory, must be the same everywhere).
int64_t rank0_value(int64_t value);

}  // namespace ember::parallel
