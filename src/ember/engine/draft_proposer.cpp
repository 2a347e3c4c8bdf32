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
                             KvBlockManager& pool, int64_t target_vocab)
    : weights_(draft_view(draft, layers, target_vocab)),
      runner_(weights_, draft_kv_options(kv, pool.n_blocks())),
      pool_(pool),
      complete_(static_cast<size_t>(pool.n_blocks()), 0) {
  if (pool.block_size() != kv.block_size) throw Error("draft: the pool's block size differs");
}

void DraftProposer::forget(int64_t sequence_id) {
  caches_.erase(sequence_id);
}

bool DraftProposer::complete(int32_t block) const {
  return complete_[static_cast<size_t>(block)] == 1 + uint64_t{pool_.contents_version(block)};
}

void DraftProposer::align(SequenceCache& cache, std::span<const int32_t> tokens,
                          const KvBlockTable& table) {
  const auto bs = static_cast<size_t>(pool_.block_size());
  const size_t limit = std::min(cache.read.size(), tokens.size() - 1);
  size_t common = 0;
  while (common < limit && cache.read[common] == tokens[common]) ++common;
  // The blocks written must still be the table's: not given back and handed out again (a
  // preempted sequence recomputes into other blocks; a cached one it gets back is unchanged).
  for (size_t i = 0; i * bs < common; ++i) {
    const auto [block, generation] = cache.written[i];
    if (i >= table.blocks.size() || table.blocks[i] != block ||
        pool_.generation(block) != generation) {
      common = i * bs;
      break;
    }
  }
  cache.read.resize(common);
  cache.written.resize((common + bs - 1) / bs);
}

void DraftProposer::adopt(SequenceCache& cache, std::span<const int32_t> tokens, size_t n_real,
                          const KvBlockTable& table) {
  const auto bs = static_cast<size_t>(pool_.block_size());
  for (size_t i = cache.read.size() / bs;
       i < table.hashes.size() && (i + 1) * bs < n_real && complete(table.blocks[i]); ++i) {
    tokens_adopted_ += static_cast<int64_t>((i + 1) * bs - cache.read.size());
    cache.read.insert(cache.read.end(),
                      tokens.begin() + static_cast<std::ptrdiff_t>(cache.read.size()),
                      tokens.begin() + static_cast<std::ptrdiff_t>((i + 1) * bs));
    cache.written.resize(i + 1);
    cache.written[i] = {table.blocks[i], pool_.generation(table.blocks[i])};
  }
}

void DraftProposer::mark_complete(const SequenceCache& cache, const KvBlockTable& table) {
  // A cached (hashed) block holds exactly these tokens after exactly this prefix, so the draft's
  // K/V of it are every holder's.
  const auto bs = static_cast<size_t>(pool_.block_size());
  const size_t n = std::min(cache.read.size() / bs, table.hashes.size());
  for (size_t i = 0; i < n; ++i) {
    const int32_t block = table.blocks[i];
    complete_[static_cast<size_t>(block)] = 1 + uint64_t{pool_.contents_version(block)};
  }
}

int64_t DraftProposer::claim(const Proposal& p, int64_t begin, int64_t n) {
  const KvBlockTable& table = *p.request->table;
  const int64_t bs = pool_.block_size();
  for (int64_t i = begin / bs; i * bs < begin + n && i < static_cast<int64_t>(table.blocks.size());
       ++i) {
    const int32_t block = table.blocks[static_cast<size_t>(i)];
    // A later cached block whose draft K/V are complete: taken as it is (adopt) next step.
    if (i * bs > begin && i < static_cast<int64_t>(table.hashes.size()) && complete(block)) {
      return i * bs - begin;
    }
    if (pool_.ref_count(block) <= 1) continue;  // this sequence's alone
    auto [it, fresh] = claims_.emplace(block, &p);
    if (!fresh && it->second != &p) return std::max<int64_t>(0, i * bs - begin);
  }
  return n;
}

void DraftProposer::drop_claims(const Proposal& p) {
  std::erase_if(claims_, [&](const auto& c) { return c.second == &p; });
}

std::vector<std::vector<int32_t>> DraftProposer::propose(std::span<const DraftRequest> requests) {
  claims_.clear();
  std::vector<Proposal> proposals;
  proposals.reserve(requests.size());
  for (const DraftRequest& r : requests) {
    SequenceCache& cache = caches_[r.sequence_id];
    Proposal p;
    p.request = &r;
    p.cache = &cache;
    p.tokens.assign(r.tokens.begin(), r.tokens.end());
    p.n_real = r.tokens.size();
    p.k = std::min<int64_t>(r.k, runner_.max_context() - static_cast<int64_t>(r.tokens.size()));
    p.active = p.k > 0 && !r.tokens.empty() && r.table != nullptr;
    if (p.active) {
      align(cache, r.tokens, *r.table);
      mark_complete(cache, *r.table);
    }
    proposals.push_back(std::move(p));
  }
  while (step(proposals)) {
  }
  claims_.clear();
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
  std::vector<Proposal*> ran;
  bool waiting = false;
  for (Proposal& p : proposals) {
    if (!p.active) continue;
    SequenceCache& c = *p.cache;
    KvBlockTable& table = *p.request->table;
    adopt(c, p.tokens, p.n_real, table);
    const auto n_read = static_cast<int64_t>(c.read.size());
    int64_t n = std::min<int64_t>(static_cast<int64_t>(p.tokens.size()) - n_read, kMaxChunk);
    n = claim(p, n_read, n);
    if (n == 0) {  // another proposal is filling the shared block first
      waiting = true;
      continue;
    }
    if (!pool_.reserve(table, n_read + n)) {
      p.active = false;  // the pool is full: no (more) guesses
      drop_claims(p);
      continue;
    }
    const auto first = static_cast<int32_t>(batch_.tokens.size());
    const auto begin = p.tokens.begin() + n_read;
    batch_.tokens.insert(batch_.tokens.end(), begin, begin + n);
    batch_.sequences.push_back({table.blocks.data(), n_read, n});
    c.read.insert(c.read.end(), begin, begin + n);
    const int64_t bs = pool_.block_size();
    c.written.resize(static_cast<size_t>((n_read + n + bs - 1) / bs));
    for (int64_t i = n_read / bs; i * bs < n_read + n; ++i) {
      const int32_t block = table.blocks[static_cast<size_t>(i)];
      c.written[static_cast<size_t>(i)] = {block, pool_.generation(block)};
    }
    tokens_computed_ += n;
    ran.push_back(&p);
    if (n_read + n == static_cast<int64_t>(p.tokens.size())) {
      batch_.logit_rows.push_back(first + static_cast<int32_t>(n - 1));
      sampled.push_back(&p);
    }
  }
  if (batch_.tokens.empty()) {
    // Nothing ran: a proposal still waiting for a claim would wait forever. No guesses for it.
    if (waiting) {
      for (Proposal& p : proposals) p.active = false;
    }
    return false;
  }
  const std::span<const float> logits = runner_.run(batch_);
  for (Proposal* p : ran) mark_complete(*p->cache, *p->request->table);
  const auto V = static_cast<size_t>(weights_.config.vocab_size);
  for (size_t i = 0; i < sampled.size(); ++i) {
    Proposal& p = *sampled[i];
    const std::span<const float> row = logits.subspan(i * V, V);
    p.tokens.push_back(p.request->choose ? p.request->choose(row, p.tokens) : argmax(row));
    if (static_cast<int64_t>(p.tokens.size() - p.n_real) >= p.k) {
      p.active = false;
      drop_claims(p);
    }
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
