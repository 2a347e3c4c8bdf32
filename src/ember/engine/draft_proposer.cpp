#include "ember/engine/draft_proposer.h"

#include <algorithm>
#include <string>

#include "ember/core/error.h"
#include "ember/engine/sampling/sampler.h"

namespace ember {

namespace {

// Unread tokens one draft step reads of a sequence (a new sequence's prompt is read in chunks).
constexpr int64_t kMaxChunk = 256;

// The draft's weights as the proposer runs them: checked against the target's vocabulary first
// (before its KV cache is sized), then cut to `layers` layers for an early exit.
ModelWeights draft_view(const ModelWeights& draft, int64_t layers, int64_t target_vocab) {
  if (draft.config.vocab_size != target_vocab) {
    throw Error::invalid_request(
        "--draft", "the draft model's vocabulary has " + std::to_string(draft.config.vocab_size) +
                       " tokens, the model's " + std::to_string(target_vocab) +
                       ": a draft must share the vocabulary");
  }
  ModelWeights w = draft;  // a view: the matrices stay where the draft's backend keeps them
  if (layers <= 0) return w;
  if (layers >= draft.config.n_layers) {
    throw Error::invalid_request("--draft-layers", "--draft-layers " + std::to_string(layers) +
                                                       " must be below the model's " +
                                                       std::to_string(draft.config.n_layers) +
                                                       " layers");
  }
  w.layers.resize(static_cast<size_t>(layers));
  w.config.n_layers = layers;
  return w;
}

EngineOptions draft_kv_options(const EngineOptions& target, int64_t n_blocks) {
  EngineOptions o = target;
  o.kv_blocks = n_blocks;
  o.prefix_caching = false;
  o.kv_tiers = {};
  o.release_window_blocks = false;  // one pool for every layer: the proposer keeps one table
  return o;
}

}  // namespace

void add_draft_pool_costs(const ModelWeights& draft, int64_t layers, bool copy,
                          const EngineOptions& kv, KvPoolCosts& costs) {
  const KvPoolCosts own =
      kv_pool_costs(draft_view(draft, layers, draft.config.vocab_size), draft_kv_options(kv, 1));
  costs.draft_block_bytes = own.block_bytes;
  costs.draft_exact_block_bytes = own.exact_block_bytes;
  costs.draft_weight_bytes = copy ? draft.matrix_bytes() : 0;
}

DraftProposer::DraftProposer(const ModelWeights& draft, int64_t layers, const EngineOptions& kv,
                             int64_t n_blocks, int64_t target_vocab)
    : weights_(draft_view(draft, layers, target_vocab)),
      runner_(weights_, draft_kv_options(kv, n_blocks)),
      blocks_(n_blocks, kv.block_size, /*prefix_caching=*/false) {}

void DraftProposer::forget(int64_t sequence_id) {
  auto it = caches_.find(sequence_id);
  if (it == caches_.end()) return;
  blocks_.release(it->second.table);
  caches_.erase(it);
}

void DraftProposer::align(SequenceCache& cache, std::span<const int32_t> tokens) {
  const size_t limit = std::min(cache.read.size(), tokens.size() - 1);
  size_t common = 0;
  while (common < limit && cache.read[common] == tokens[common]) ++common;
  blocks_.truncate(cache.table, static_cast<int64_t>(common));
  cache.read.resize(common);
}

bool DraftProposer::reserve(SequenceCache& cache, int64_t n_tokens) {
  while (!blocks_.reserve(cache.table, n_tokens)) {
    // Drop the least recently used cache of a sequence not proposing in this call.
    auto victim = caches_.end();
    for (auto it = caches_.begin(); it != caches_.end(); ++it) {
      if (it->second.last_used == clock_) continue;
      if (victim == caches_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == caches_.end()) return false;
    blocks_.release(victim->second.table);
    caches_.erase(victim);
  }
  return true;
}

std::vector<std::vector<int32_t>> DraftProposer::propose(std::span<const DraftRequest> requests) {
  ++clock_;
  std::vector<Proposal> proposals;
  proposals.reserve(requests.size());
  for (const DraftRequest& r : requests) {
    SequenceCache& cache = caches_[r.sequence_id];
    cache.last_used = clock_;
    align(cache, r.tokens);
    Proposal p;
    p.request = &r;
    p.cache = &cache;
    p.tokens.assign(r.tokens.begin(), r.tokens.end());
    p.n_real = r.tokens.size();
    p.k = std::min<int64_t>(r.k, runner_.max_context() - static_cast<int64_t>(r.tokens.size()));
    p.active = p.k > 0 && !r.tokens.empty();
    proposals.push_back(std::move(p));
  }
  while (step(proposals)) {
  }
  std::vector<std::vector<int32_t>> guesses;
  guesses.reserve(proposals.size());
  for (const Proposal& p : proposals) {
    guesses.emplace_back(p.tokens.begin() + static_cast<std::ptrdiff_t>(p.n_real), p.tokens.end());
  }
  return guesses;
}

bool DraftProposer::step(std::vector<Proposal>& proposals) {
  batch_.clear();
  std::vector<Proposal*> sampled;  // the proposals whose chunk ends at their last token, in rows
  for (Proposal& p : proposals) {
    if (!p.active) continue;
    SequenceCache& c = *p.cache;
    const auto n_read = static_cast<int64_t>(c.read.size());
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(p.tokens.size()) - n_read, kMaxChunk);
    if (!reserve(c, n_read + n)) {
      p.active = false;  // the pool is full of sequences proposing now: no (more) guesses
      continue;
    }
    const auto first = static_cast<int32_t>(batch_.tokens.size());
    const auto begin = p.tokens.begin() + n_read;
    batch_.tokens.insert(batch_.tokens.end(), begin, begin + n);
    batch_.sequences.push_back({c.table.blocks.data(), n_read, n});
    c.read.insert(c.read.end(), begin, begin + n);
    if (n_read + n == static_cast<int64_t>(p.tokens.size())) {
      batch_.logit_rows.push_back(first + static_cast<int32_t>(n - 1));
      sampled.push_back(&p);
    }
  }
  if (batch_.tokens.empty()) return false;
  const std::span<const float> logits = runner_.run(batch_);
  const auto V = static_cast<size_t>(weights_.config.vocab_size);
  for (size_t i = 0; i < sampled.size(); ++i) {
    Proposal& p = *sampled[i];
    const std::span<const float> row = logits.subspan(i * V, V);
    p.tokens.push_back(p.request->choose ? p.request->choose(row, p.tokens) : argmax(row));
    if (static_cast<int64_t>(p.tokens.size() - p.n_real) >= p.k) p.active = false;
  }
  return true;
}

void check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (target.vocab_size() != draft.vocab_size()) {
    throw Error::invalid_request("--draft",
                                 "the draft's tokenizer has " + std::to_string(draft.vocab_size()) +
                                     " tokens, the model's " + std::to_string(target.vocab_size()) +
                                     ": a draft must share the vocabulary");
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if (target.token_bytes(id) != draft.token_bytes(id)) {
      throw Error::invalid_request("--draft",
                                   "the draft's tokenizer differs from the model's at token " +
                                       std::to_string(id) + ": a draft must share the vocabulary");
    }
  }
}

}  // namespace ember
