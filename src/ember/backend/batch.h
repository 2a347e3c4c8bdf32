// One forward step's input as every backend op sees it: a flat batch of T tokens drawn from any
// number of sequences (whole prompts, prompt chunks, single decode tokens). Every op treats T as a
// batch dimension except attention, which reads each token's sequence through its block table.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

// One sequence's share of a step: its n_tokens new tokens sit contiguously in Batch::tokens and
// take positions [start_position, start_position + n_tokens).
struct BatchSequence {
  const int32_t* block_table = nullptr;  // covers start_position + n_tokens positions
  int64_t start_position = 0;
  int64_t n_tokens = 0;
  // The sequence's table in the KV storage of a model's sliding-window layers when they are kept
  // apart from its global layers (KvShape::window_table, backend/kv_cache.h); null otherwise.
  const int32_t* window_block_table = nullptr;
};

struct Batch {
  std::vector<int32_t> tokens;           // [T], sequence after sequence
  std::vector<BatchSequence> sequences;  // in the same order as their tokens
  std::vector<int32_t> logit_rows;       // flat token indices whose logits are wanted
  std::vector<int32_t> hidden_rows;      // flat token indices whose final hidden states are wanted
  // ember trace: the index in `sequences` of the one a ForwardObserver records (-1: the step's
  // only sequence, or none observed).
  int32_t observed_sequence = -1;
  // Derived by finalize(): per token, its position and its sequence's index.
  std::vector<int32_t> positions;    // [T]
  std::vector<int32_t> sequence_of;  // [T]

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void clear();
  // Checks that the sequences cover the tokens and fills positions / sequence_of. Throws
  // ember::Error for an inconsistent batch.
  void finalize();
};

}  // namespace ember
