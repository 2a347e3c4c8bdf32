// `mpirun -np N ember run|score|bench|chat ... --tp N`: the N processes load one model split N ways
// (tensor_shard.h) and run the same program in step. Every rank runs the same engine on the same
// inputs; the only traffic is the two all-reduces per layer (communicator.h), whose sums carry the
// same bits to every rank, so every rank samples the same tokens. Rank 0 prints; the others keep
// quiet. An error on any rank ends every rank (main's error path aborts the job).
#pragma once

#include <string>

#include "ember/model/weights.h"
#include "ember/parallel/tensor_shard.h"

namespace ember::parallel {

// For --tp n > 1: checks that this ember has MPI, that mpirun started exactly n processes and
// that the backend computes in host memory; returns this rank's split. Throws naming --tp.
TensorSplit join_tensor_parallel(int tp, const std::string& backend);

// After every rank loaded its shard: checks that all ranks opened the same model (the weights'
// fingerprint) with the same command line, wires the weights' partial sums to the all-reduce, and
// sends the stdout of every rank but 0 to /dev/null. Throws (on every rank) when they differ.
void attach_tensor_parallel(ModelWeights& weights);

}  // namespace ember::parallel
