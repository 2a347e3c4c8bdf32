#include "ember/engine/scheduler.h"

#include <algorithm>

namespace ember {

Scheduler::Scheduler(const SchedulerConfig& config, int64_t n_blocks, int64_t block_size,
                     bool prefix_caching)
    : config_(config), kv_(n_blocks, block_size, prefix_caching) {
  if (config.window_layers_window > 0) {
    window_kv_.emplace(config.window_pool_blocks, block_size, prefix_caching);
  }
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  waiting_.push_back(std::move(seq));
}

void Scheduler::release(KvBlockTable& table, KvBlockTable& window_table) {
  kv_.release(table);  // full blocks stay in the prefix cache, if enabled
  if (window_kv_) window_kv_->release(window_table);
}

void Scheduler::truncate(KvBlockTable& table, KvBlockTable& window_table, int64_t n_tokens) {
  kv_.truncate(table, n_tokens);
  if (window_kv_) window_kv_->truncate(window_table, n_tokens);
}

int64_t Scheduler::cut_point(const KvBlockTable& table, const KvBlockTable& window_table,
                             int64_t n_tokens) const {
  const int64_t bs = kv_.block_size();
  if (n_tokens % bs == 0) return n_tokens;
  const auto shared = [&](const KvBlockManager& kv, const KvBlockTable& t) {
    const auto i = static_cast<size_t>(n_tokens / bs);
    return i < t.blocks.size() && t.blocks[i] >= 0 && kv.ref_count(t.blocks[i]) > 1;
  };
  if (shared(kv_, table) || (window_kv_ && shared(*window_kv_, window_table))) {
    return n_tokens / bs * bs;
  }
  return n_tokens;
}

bool Scheduler::can_resume(const KvBlockTable& table, const KvBlockTable& window_table,
                           int64_t n_tokens) const {
  // The next token (position n_tokens) attends from n_tokens - window + 1 on.
  const int64_t begin = config_.sliding_window > 0 ? n_tokens - config_.sliding_window + 1 : 0;
  if (!kv_.holds_positions(table, begin, n_tokens)) return false;
  return !window_kv_ || window_kv_->holds_positions(
                            window_table, n_tokens - config_.window_layers_window + 1, n_tokens);
}

void Scheduler::release(Sequence& seq) {
  release(seq.block_table, seq.window_table);
  seq.n_cached = 0;
}

bool Scheduler::fits(const Sequence& seq, int64_t n_tokens) const {
  if (kv_.blocks_needed(seq.block_table, n_tokens) > kv_.available_blocks()) return false;
  return !window_kv_ ||
         window_kv_->blocks_needed(seq.window_table, n_tokens) <= window_kv_->available_blocks();
}

void Scheduler::reserve(Sequence& seq, int64_t n_tokens) {
  kv_.reserve(seq.block_table, n_tokens);
  if (window_kv_) window_kv_->reserve(seq.window_table, n_tokens);
}

int64_t Scheduler::chunk_capacity(const Sequence& seq, int64_t n) const {
  // Whole blocks past what each table holds.
  const auto capacity = [&](const KvBlockManager& kv, const KvBlockTable& table) {
    return (static_cast<int64_t>(table.blocks.size()) + kv.available_blocks()) * kv.block_size();
  };
  n = std::min(n, capacity(kv_, seq.block_table) - seq.n_cached);
  if (window_kv_) n = std::min(n, capacity(*window_kv_, seq.window_table) - seq.n_cached);
  return n;
}

int64_t Scheduler::match_prefix(Sequence& seq) {
  const int64_t n = kv_.match_prefix(seq.block_table, seq.tokens);
  if (!window_kv_ || n == 0) return n;
  // The window pool may have given back or evicted blocks the main pool still caches: the prefix
  // is the longest cut both hold (the window pool only the blocks the next token's window needs).
  const int64_t cut =
      window_kv_->match_window(seq.window_table, seq.tokens, n, config_.window_layers_window);
  if (cut < n) kv_.truncate(seq.block_table, cut);
  return cut;
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<Sequence> victim = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  release(*victim);
  victim->prefix_looked_up = false;
  ++preemptions_;
  // Back to the front of the queue: it arrived before anything still waiting behind it.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& w) { return w->arrival > victim->arrival; });
  waiting_.insert(pos, std::move(victim));
}

std::vector<ScheduledChunk> Scheduler::schedule(std::vector<std::unique_ptr<Sequence>>& failed,
                                                int64_t max_chunks) {
  std::vector<ScheduledChunk> chunks;
  int64_t budget = config_.max_batched_tokens;
  schedule_running(chunks, budget, max_chunks);
  schedule_waiting(chunks, budget, max_chunks, failed);
  return chunks;
}

bool Scheduler::make_room(Sequence* s, int64_t n, std::vector<ScheduledChunk>& chunks,
                          int64_t& budget, bool& s_preempted) {
  while (!fits(*s, s->n_cached + n)) {
    size_t youngest = running_.size() - 1;
    while (running_[youngest].get() != s && running_[youngest]->chunks_in_flight > 0) --youngest;
    if (running_[youngest].get() == s) {
      if (s->chunks_in_flight > 0) return false;  // the pool frees up as the steps in flight land
      preempt(youngest);
      s_preempted = true;
      return false;
    }
    Sequence* victim = running_[youngest].get();
    auto it =
        std::find_if(chunks.begin(), chunks.end(), [&](const auto& c) { return c.seq == victim; });
    if (it != chunks.end()) {
      budget += it->n_tokens;
      chunks.erase(it);
    }
    preempt(youngest);
  }
  return true;
}

// Running sequences: decoders first (one token each), then those still prefilling. When the pool
// is short, the youngest running sequences are preempted until the current one fits.
void Scheduler::schedule_running(std::vector<ScheduledChunk>& chunks, int64_t& budget,
                                 int64_t max_chunks) {
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence* s = running_[i].get();
      // A decoder's chunk is its last sampled token plus any speculative guesses.
      const bool decoding = s->pending_tokens() - s->n_draft == 1 && s->prefilled();
      if ((pass == 0) != decoding || s->pending_tokens() == 0 ||
          static_cast<int64_t>(chunks.size()) >= max_chunks ||
          std::any_of(chunks.begin(), chunks.end(), [&](const auto& c) { return c.seq == s; })) {
        ++i;
        continue;
      }
      const int64_t n = std::min(s->pending_tokens(), budget);
      bool self_preempted = false;
      if (!make_room(s, n, chunks, budget, self_preempted)) {
        // Preempted: s was the youngest without a chunk in flight, so nothing after it can run.
        if (self_preempted) break;
        ++i;  // s has a chunk in flight and no younger sequence to make room: a later step
        continue;
      }
      reserve(*s, s->n_cached + n);
      chunks.push_back({s, s->n_cached, n, n == s->pending_tokens()});
      budget -= n;
      ++i;
    }
  }
}

// Waiting sequences, first come first served, while budget, sequence slots and blocks last.
void Scheduler::schedule_waiting(std::vector<ScheduledChunk>& chunks, int64_t& budget,
                                 int64_t max_chunks,
                                 std::vector<std::unique_ptr<Sequence>>& failed) {
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(chunks.size()) < max_chunks &&
         static_cast<int64_t>(running_.size()) < config_.max_sequences) {
    Sequence* s = waiting_.front().get();
    if (!s->prefix_looked_up) {
      // Echo's logprobs cover every prompt token, and a traced request shows every prompt
      // position: such requests take no prefix (prompt_logits rows start after a cached prefix,
      // which the tests of the tiers rely on).
      const bool whole = s->request.prompt_logprobs >= 0 || s->request.observer != nullptr;
      s->n_cached = whole ? 0 : match_prefix(*s);
      if (!s->scheduled_once) s->cached_prompt_tokens = std::min(s->n_cached, s->n_prompt);
      s->prefix_looked_up = true;
    }
    int64_t n = std::min(s->pending_tokens(), budget);
    if (!fits(*s, s->n_cached + n)) {
      n = chunk_capacity(*s, n);  // shrink the chunk to the blocks there are
      if (n <= 0) {
        if (running_.empty() && chunks.empty()) {
          // Even an empty pool cannot hold it: fail the request instead of waiting forever.
          std::unique_ptr<Sequence> dead = std::move(waiting_.front());
          waiting_.pop_front();
          release(*dead);
          failed.push_back(std::move(dead));
          continue;
        }
        // A waiting sequence holds no blocks: the prefix it matched goes back to the cache (still
        // found there next time). Held, such prefixes of several waiting sequences could fill the
        // pool with nothing running, and the check above would fail a request that fits.
        release(*s);
        s->prefix_looked_up = false;
        break;
      }
    }
    reserve(*s, s->n_cached + n);
    s->scheduled_once = true;
    chunks.push_back({s, s->n_cached, n, n == s->pending_tokens()});
    budget -= n;
    // Keep running_ in arrival order (a preempted sequence rejoins ahead of younger ones), so
    // "youngest" is always the back.
    auto pos = std::find_if(running_.begin(), running_.end(),
                            [&](const auto& r) { return r->arrival > s->arrival; });
    running_.insert(pos, std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Scheduler::commit(const ScheduledChunk& chunk) {
  Sequence& s = *chunk.seq;
  s.n_cached += chunk.n_tokens;
  const auto cached = std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.n_cached));
  kv_.commit(s.block_table, cached);
  if (window_kv_) window_kv_->commit(s.window_table, cached);
  // The next token (position n_cached) attends from n_cached - window + 1 on; the step's guesses
  // may all be rejected, so the window is kept from the last sampled token's position.
  const int64_t next = s.n_cached - s.n_draft;
  if (config_.sliding_window > 0) {
    kv_.release_before(s.block_table, next - config_.sliding_window + 1);
  }
  if (window_kv_) {
    window_kv_->release_before(s.window_table, next - config_.window_layers_window + 1);
  }
}

std::unique_ptr<Sequence> Scheduler::remove(Sequence* seq, bool keep_blocks) {
  std::unique_ptr<Sequence> out;
  auto r =
      std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == seq; });
  if (r != running_.end()) {
    out = std::move(*r);
    running_.erase(r);
  } else {
    auto w = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& p) { return p.get() == seq; });
    if (w == waiting_.end()) return nullptr;
    out = std::move(*w);
    waiting_.erase(w);
  }
  if (!keep_blocks) release(*out);
  return out;
}

}  // namespace ember
