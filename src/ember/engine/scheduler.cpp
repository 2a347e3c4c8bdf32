#include "ember/engine/scheduler.h"

#include <algorithm>

namespace ember {

Scheduler::Scheduler(const SchedulerConfig& config, int64_t n_blocks, int64_t block_size,
                     bool prefix_caching)
    : config_(config), kv_(n_blocks, block_size, prefix_caching) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  waiting_.push_back(std::move(seq));
}

void Scheduler::release(Sequence& seq) {
  kv_.release(seq.block_table);  // full blocks stay in the prefix cache, if enabled
  seq.n_cached = 0;
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

std::vector<ScheduledChunk> Scheduler::schedule(std::vector<std::unique_ptr<Sequence>>& failed) {
  std::vector<ScheduledChunk> chunks;
  int64_t budget = config_.max_batched_tokens;
  schedule_running(chunks, budget);
  schedule_waiting(chunks, budget, failed);
  return chunks;
}

// Running sequences: decoders first (one token each), then those still prefilling. When the pool
// is short, the youngest running sequences are preempted until the current one fits.
void Scheduler::schedule_running(std::vector<ScheduledChunk>& chunks, int64_t& budget) {
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence* s = running_[i].get();
      // A decoder's chunk is its last sampled token plus any speculative guesses.
      const bool decoding = s->pending_tokens() - s->n_draft == 1 && s->prefilled();
      if ((pass == 0) != decoding ||
          std::any_of(chunks.begin(), chunks.end(), [&](const auto& c) { return c.seq == s; })) {
        ++i;
        continue;
      }
      const int64_t n = std::min(s->pending_tokens(), budget);
      bool self_preempted = false;
      while (kv_.blocks_needed(s->block_table, s->n_cached + n) > kv_.available_blocks()) {
        const size_t youngest = running_.size() - 1;
        if (running_[youngest].get() == s) {
          preempt(youngest);
          self_preempted = true;
          break;
        }
        Sequence* victim = running_[youngest].get();
        auto it = std::find_if(chunks.begin(), chunks.end(),
                               [&](const auto& c) { return c.seq == victim; });
        if (it != chunks.end()) {
          budget += it->n_tokens;
          chunks.erase(it);
        }
        preempt(youngest);
      }
      if (self_preempted) break;  // s was the youngest: nothing after it is running
      kv_.reserve(s->block_table, s->n_cached + n);
      chunks.push_back({s, n, n == s->pending_tokens()});
      budget -= n;
      ++i;
    }
  }
}

// Waiting sequences, first come first served, while budget, sequence slots and blocks last.
void Scheduler::schedule_waiting(std::vector<ScheduledChunk>& chunks, int64_t& budget,
                                 std::vector<std::unique_ptr<Sequence>>& failed) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_sequences) {
    Sequence* s = waiting_.front().get();
    if (!s->prefix_looked_up) {
      // Echo's logprobs cover every prompt token, and a traced request shows every prompt
      // position: such requests take no prefix (prompt_logits rows start after a cached prefix,
      // which the tests of the tiers rely on).
      const bool whole = s->request.prompt_logprobs >= 0 || s->request.observer != nullptr;
      s->n_cached = whole ? 0 : kv_.match_prefix(s->block_table, s->tokens);
      if (!s->scheduled_once) s->cached_prompt_tokens = std::min(s->n_cached, s->n_prompt);
      s->prefix_looked_up = true;
    }
    int64_t n = std::min(s->pending_tokens(), budget);
    if (kv_.blocks_needed(s->block_table, s->n_cached + n) > kv_.available_blocks()) {
      // Shrink the chunk to the blocks there are (whole blocks past what the table holds).
      const int64_t capacity =
          (static_cast<int64_t>(s->block_table.blocks.size()) + kv_.available_blocks()) *
          kv_.block_size();
      n = std::min(n, capacity - s->n_cached);
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
    kv_.reserve(s->block_table, s->n_cached + n);
    s->scheduled_once = true;
    chunks.push_back({s, n, n == s->pending_tokens()});
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
  kv_.commit(s.block_table,
             std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.n_cached)));
  // The next token (position n_cached) attends from n_cached - window + 1 on.
  if (config_.sliding_window > 0) {
    kv_.release_before(s.block_table, s.n_cached - config_.sliding_window + 1);
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
