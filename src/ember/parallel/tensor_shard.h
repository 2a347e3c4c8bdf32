// One rank's part of a model under tensor parallelism (Megatron's split): Q/K/V and gate/up by
// output rows (this rank's heads, its KV heads, its FFN rows), O and down by input columns (the
// same heads and rows), the Q/K/V biases with their rows, lm_head by rows of the vocabulary (a
// view of the token table when tied); the embedding and the norms whole on every rank. The rank's
// checkpoint is the file's with those tensors cut and its config with n_heads, n_kv_heads and d_ffn
// divided: the loader builds it as an ordinary, smaller model, and the outputs of O and down are
// then partial sums the ranks add (an all-reduce after each). When there are more ranks than KV
// heads, each KV head is held by size / n_kv_heads ranks.
#pragma once

#include <string>

#include "ember/model/checkpoint.h"

namespace ember::parallel {

struct TensorSplit {
  int rank = 0;
  int size = 1;
};

// Rows (or columns) a rank owns: [begin, begin + count).
struct Range {
  int64_t begin = 0, count = 0;
};

// The vocabulary rows of lm_head rank `split.rank` holds: ceil(vocab / size) each, the last rank
// what is left (the logits are gathered after it).
Range vocab_rows(int64_t vocab, TensorSplit split);

// The shape rank `split.rank` holds; throws ember::Error naming --tp when the heads, KV heads or
// FFN rows do not divide, or the family is one the split is not built for.
ModelConfig shard_config(const ModelConfig& full, TensorSplit split);

// `full` (opened, no weight read) cut to rank `split.rank`'s tensors; rows are views into the
// file, column cuts and fused tensors new bytes the checkpoint owns. Throws ember::Error naming
// the tensor when a column cut falls inside a quantized block.
Checkpoint shard_checkpoint(const Checkpoint& full, TensorSplit split);

}  // namespace ember::parallel
