// `mpirun -np N ember run|score|bench ... --tp N` (or `--pp N`): the N processes load one model
// split N ways, by heads and FFN rows (tensor_shard.h) or by layers (pipeline_stage.h), and run the
// same program in step. Every rank runs the same engine on the same inputs; the only traffic is the
// two all-reduces per layer (communicator.h), whose sums carry the same bits to every rank, or the
// hidden states handed from stage to stage and the last stage's logits sent to all, so every rank
// samples the same tokens. Rank 0 prints; the others keep quiet. An error on any rank ends every
// rank (main's error path aborts the job).
#pragma once

#include <string>

#include "ember/model/weights.h"
#include "ember/parallel/pipeline_stage.h"
#include "ember/parallel/tensor_shard.h"

namespace ember::parallel {

// This rank's part of the model: its heads (tensor) or its layers (pipeline).
struct ParallelLayout {
  TensorSplit tensor;
  PipelineSplit pipeline;
};

// For --tp or --pp > 1: checks that this ember has MPI and that mpirun started exactly tp x pp
// processes; returns this rank's part. Throws naming the flag. (Any backend: host backends add
// the partial sums with MPI, cuda with NCCL; pipeline hand-offs go through host memory.)
ParallelLayout join_parallel(int tp, int pp);

// The checkpoint cut to this rank's part (for LoadOptions::adapt_checkpoint).
void cut_checkpoint(Checkpoint& ckpt, const ParallelLayout& layout);

// After every rank loaded its part: checks that all ranks opened the same model (the weights'
// fingerprint) with the same command line, wires the weights' hooks to the communicator (the
// partial sums' all-reduce and the logits' gather; the stages' hand-offs and the logits'
// broadcast), and sends the stdout of every rank but 0 to /dev/null. Throws (on every rank) when
// they differ.
void attach_parallel(ModelWeights& weights, const ParallelLayout& layout);

class Communicator;
// Tensor parallelism's hooks on `weights` (attach_parallel's, for the tensor group `ranks`): the
// partial sums' all-reduce in the backend's memory (Backend::all_reduce_sum), the host sums', and
// each rank's [rows, its part of the vocabulary] of logits, padded to the same size, gathered into
// [rows, vocab]. `ranks` must outlive the weights' use.
void attach_tensor_sums(ModelWeights& weights, Communicator& ranks);

}  // namespace ember::parallel
