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
// The draft's K/V live in the target's block pool, as vLLM keeps a draft's layers: one block id
// stands for the target's K/V of block_size positions and the draft's of the same positions (the
// draft's storage, its own layers and heads, has as many blocks as the target's pool), and a
// sequence's one block table indexes both. So the draft costs no pool or books of its own: its
// blocks are allocated, preempted, rolled back and freed with the sequence's, its guesses' blocks
// are the ones the verifying step writes next, and a prefix cached for one request carries the
// draft's K/V to the next. The draft runs lazily: each sequence records the tokens the draft has
// read (and the blocks, by generation, it wrote them to); before proposing that record is cut to
// the prefix it shares with the sequence's tokens now and the blocks it still holds, then extended
// over cached blocks whose draft K/V another sequence completed. A shared block the draft still
// has to fill is written by one proposal at a time (the others wait a draft step, then take its
// work), so no two rows of a step write the same positions.
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
  // The sequence's block table in the target's pool: the draft reads and writes its K/V through
  // it, and reserves the blocks of its guesses in it.
  KvBlockTable* table = nullptr;
};

// What the draft's K/V add to each block of the pool (its layers, the target's cache options `kv`)
// and, for a draft with weights of its own (`copy`), those weights: the draft_* fields of
// KvPoolCosts. `layers`: as DraftProposer's.
void add_draft_pool_costs(const ModelWeights& draft, int64_t layers, bool copy,
                          const EngineOptions& kv, KvPoolCosts& costs);

class DraftProposer {
 public:
  // `draft`: the draft's weights (cut to `layers` layers when > 0); must outlive the proposer.
  // `kv`: the target's cache options (context, block size, dtypes); `pool`: the target's main
  // pool (its block tables are the requests' tables), which must outlive the proposer.
  // Throws ember::Error (naming --draft / --draft-layers) when the draft's vocabulary size differs
  // from `target_vocab` or `layers` is out of range.
  DraftProposer(const ModelWeights& draft, int64_t layers, const EngineOptions& kv,
                KvBlockManager& pool, int64_t target_vocab);

  // Up to requests[i].k guesses for each request (fewer, or none, when the pool has no blocks left
  // for the guesses' positions).
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests);
  // The sequence finished: its record goes (its blocks are the sequence's, freed with them).
  void forget(int64_t sequence_id);

  const ModelWeights& weights() const { return weights_; }
  // Positions the draft ran, and positions it took from blocks another sequence's draft filled.
  int64_t tokens_computed() const { return tokens_computed_; }
  int64_t tokens_adopted() const { return tokens_adopted_; }

 private:
  // Where a sequence's draft K/V are: the tokens read, and per block-table index the block and its
  // generation when the draft wrote there (a block given back and handed out again is not ours).
  struct SequenceCache {
    std::vector<int32_t> read;
    std::vector<std::pair<int32_t, uint32_t>> written;
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

  // Cuts the record to the prefix it shares with `tokens` in blocks the table still holds, leaving
  // the last token unread (its logits are the first guess's).
  void align(SequenceCache& cache, std::span<const int32_t> tokens, const KvBlockTable& table);
  // Extends the record over the table's cached blocks (of real tokens, before `n_real` - 1) whose
  // draft K/V are complete.
  void adopt(SequenceCache& cache, std::span<const int32_t> tokens, size_t n_real,
             const KvBlockTable& table);
  // Marks the table's cached blocks the record covers as complete for other sequences.
  void mark_complete(const SequenceCache& cache, const KvBlockTable& table);
  bool complete(int32_t block) const;
  // How many of the `n` positions from `begin` a proposal may write this step: up to the first
  // block shared with another sequence that another proposal of this call claimed (claiming the
  // shared blocks it will write), or a later cached block whose draft K/V are complete.
  int64_t claim(const Proposal& p, int64_t begin, int64_t n);
  void drop_claims(const Proposal& p);
  // One draft forward over every active proposal's unread tokens (at most kMaxChunk each); the
  // argmax of each proposal whose chunk reached its end becomes its next guess. False when no
  // proposal made progress.
  bool step(std::vector<Proposal>& proposals);

  ModelWeights weights_;  // the draft's (a view cut to `layers` for an early exit)
  ModelRunner runner_;
  KvBlockManager& pool_;
  // Per block: 1 + the contents version (KvBlockManager) in which the draft's K/V of all its
  // (cached) positions were complete, 0 if never.
  std::vector<uint64_t> complete_;
  std::unordered_map<int64_t, SequenceCache> caches_;
  std::unordered_map<int32_t, const Proposal*> claims_;  // shared blocks being written, this call
  int64_t tokens_computed_ = 0;
  int64_t tokens_adopted_ = 0;
  Batch batch_;
};

// Checks that a draft tokenizer has the target's vocabulary: the same size and the same bytes for
// every token id. Throws ember::Error naming --draft and the first id that differs.
void check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace ember
