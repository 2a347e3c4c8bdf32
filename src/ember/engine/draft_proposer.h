// Speculative decoding's model proposer: a draft model guesses the next k tokens of each sequence,
// k forward steps of the draft batched across the sequences. Greedy requests take the draft's
// argmax and are verified as prompt-lookup guesses are (engine/speculative.h: the output is the
// plain output, token for token). Sampled requests draw each guess from the draft's distribution
// q under the request's own sampling settings, and the engine keeps it with probability
// min(1, p/q), else draws from max(0, p - q) (accept_or_resample): the output is distributed
// exactly as the model's.
//
// The draft is one of (engine/speculative.h, SpeculativeOptions):
//   - another model sharing the vocabulary (--draft MODEL), built into the target's backend;
//   - the target's own file quantized lower (--draft-dtype q4_0): a second, smaller copy;
//   - the target's first N layers plus its final norm and head (--draft-layers N): an early exit
//     that reads the same weights and costs no memory beyond its KV cache.
//
// The draft keeps its own paged KV cache (its layers and heads differ from the target's, so its
// blocks cannot live in the target's pool): a pool with as many blocks as the target's, the same
// block size, the target's KV dtypes. Each sequence's draft cache holds the tokens the draft has
// read; before proposing it is cut to the prefix those share with the sequence's tokens now (the
// rejected guesses and anything else that changed), so it never has to be told what happened.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "ember/backend/batch.h"
#include "ember/engine/model_runner.h"
#include "ember/kv/kv_block_manager.h"
#include "ember/model/weights.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

// One sequence asking for guesses: its tokens so far (prompt + generated) and how many; `choose`
// picks each guess from the draft's logits row given the tokens before it (the sequence's and
// the guesses so far): empty for the argmax (greedy requests), else the engine's draw from the
// draft's distribution under the request's sampling settings.
struct DraftRequest {
  int64_t sequence_id = 0;
  std::span<const int32_t> tokens;
  int64_t k = 0;
  std::function<int32_t(std::span<const float> logits, std::span<const int32_t> tokens)> choose;
};

// What the draft's pool costs per block (its layers, the target's cache options `kv`, every layer
// in one pool) and, for a draft with weights of its own (`copy`), those weights: the draft_* fields
// of KvPoolCosts. `layers`: as DraftProposer's.
void add_draft_pool_costs(const ModelWeights& draft, int64_t layers, bool copy,
                          const EngineOptions& kv, KvPoolCosts& costs);

class DraftProposer {
 public:
  // `draft`: the draft's weights (cut to `layers` layers when > 0); must outlive the proposer.
  // `kv`: the target's cache options (context, block size, dtypes); `n_blocks`: the target pool's.
  // Throws ember::Error (naming --draft / --draft-layers) when the draft's vocabulary size differs
  // from `target_vocab` or `layers` is out of range.
  DraftProposer(const ModelWeights& draft, int64_t layers, const EngineOptions& kv,
                int64_t n_blocks, int64_t target_vocab);

  // Up to requests[i].k guesses for each request (fewer, or none, when the draft's pool has no room
  // even after dropping the caches of sequences not asking now).
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests);
  // The sequence finished: its draft cache goes back to the pool.
  void forget(int64_t sequence_id);

  const ModelWeights& weights() const { return weights_; }
  int64_t blocks_in_use() const { return blocks_.used_blocks(); }

 private:
  struct SequenceCache {
    KvBlockTable table;
    std::vector<int32_t> read;  // the tokens whose K/V the draft's cache holds
    uint64_t last_used = 0;
  };
  // One request's progress through propose(): its tokens followed by the guesses made so far.
  struct Proposal {
    const DraftRequest* request = nullptr;
    SequenceCache* cache = nullptr;
    std::vector<int32_t> tokens;
    size_t n_real = 0;  // tokens before the guesses
    int64_t k = 0;
    bool active = true;
  };

  // Cuts the cache to the prefix it shares with `tokens`, leaving the last token unread (its
  // logits are the first guess's).
  void align(SequenceCache& cache, std::span<const int32_t> tokens);
  // Reserves the draft blocks for `n_tokens` positions, dropping other sequences' caches (least
  // recently used first) when the pool is full. False when it still cannot.
  bool reserve(SequenceCache& cache, int64_t n_tokens);
  // One draft forward over every active proposal's unread tokens (at most kMaxChunk each); the
  // argmax of each proposal whose chunk reached its end becomes its next guess. False when no
  // proposal was active.
  bool step(std::vector<Proposal>& proposals);

  ModelWeights weights_;  // the draft's (a view cut to `layers` for an early exit)
  ModelRunner runner_;
  KvBlockManager blocks_;
  std::unordered_map<int64_t, SequenceCache> caches_;
  uint64_t clock_ = 0;
  Batch batch_;
};

// Checks that a draft tokenizer has the target's vocabulary: the same size and the same bytes for
// every token id. Throws ember::Error naming --draft and the first id that differs.
void check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace ember
