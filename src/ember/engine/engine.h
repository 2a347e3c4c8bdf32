// Owns the runtime state around a loaded model: the KV storage (allocated by the model's backend),
// the block manager that keeps its books, and the model's forward pass.
// feed() pushes new tokens of one or more sequences through one forward step (a whole prompt is
// one matrix x matrix step; a decode token is a step of T = 1) and returns their logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/engine/sequence.h"
#include "ember/kv/kv_block_manager.h"
#include "ember/model/llama.h"
#include "ember/model/weights.h"

namespace ember {

struct EngineOptions {
  int64_t max_context = 0;    // per sequence; 0: min(model's max positions, 4096)
  int64_t max_sequences = 1;  // sizes the KV pool together with max_context
  int64_t block_size = 16;    // tokens per KV block
  int64_t kv_blocks = 0;      // 0: enough for max_sequences x max_context
  bool prefix_caching = false;
  DType kv_dtype = DType::F32;  // KV cache storage: F32, or F16 (half the memory and traffic)
};

// What one sequence contributes to a multi-sequence step.
struct FeedRequest {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;  // appended to sequence->tokens and run
  bool all_logits = false;          // logits for every new token, else only for the last
  bool wants_logits = true;         // false: no logits at all (a prompt chunk that is not the end)
};

class Engine {
 public:
  Engine(const ModelWeights& weights, const EngineOptions& options);

  // Runs `tokens` for `seq`; returns logits [n, vocab] where n = tokens.size() if all_logits
  // else 1 (valid until the next call). Throws ember::Error when the context or KV pool is full.
  std::span<const float> feed(Sequence& seq, std::span<const int32_t> tokens,
                              bool all_logits = false);
  // Several sequences in one forward step; logits rows follow the requests' order (requests with
  // wants_logits = false contribute none).
  std::span<const float> feed(std::span<FeedRequest> requests);
  // For a fresh sequence about to run `prompt`: attaches the prefix-cached blocks of it and marks
  // those tokens computed (seq.tokens = that prefix). Returns how many tokens were cached.
  int64_t attach_cached_prefix(Sequence& seq, std::span<const int32_t> prompt);
  // Forgets the sequence's cache past its first n_tokens tokens (e.g. to re-prefill from where a
  // re-rendered chat history diverges from what is cached).
  void truncate(Sequence& seq, int64_t n_tokens);
  // Returns the sequence's blocks to the pool and forgets its cache.
  void release(Sequence& seq);

  const ModelWeights& weights() const { return weights_; }
  const KvShape& kv_shape() const { return kv_storage_->shape(); }
  const KvBlockManager& kv() const { return kv_; }
  KvBlockManager& kv() { return kv_; }
  int64_t kv_bytes_in_use() const { return kv_.used_blocks() * kv_shape().bytes_per_block(); }
  int64_t max_context() const { return max_context_; }
  int n_threads() const { return weights_.backend->info().threads; }
  int64_t vocab_size() const { return weights_.config.vocab_size; }

 private:
  const ModelWeights& weights_;
  int64_t max_context_;
  std::unique_ptr<KvStorage> kv_storage_;
  KvBlockManager kv_;
  LlamaModel model_;
  Batch step_;
};

}  // namespace ember
