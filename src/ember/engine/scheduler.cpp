#include "ember/engine/scheduler.h"

#include <algorithm>

namespace ember {

Scheduler::Scheduler(const SchedulerConfig& config, Engine& engine)
    : config_(config), engine_(engine) {}

void Scheduler::add(std::unique_ptr<SequenceState> state) {
  waiting_.push_back(std::move(state));
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<SequenceState> victim = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  engine_.release(victim->seq);  // its full blocks stay in the prefix cache, if enabled
  victim->seq.tokens.clear();
  victim->prefix_looked_up = false;
  ++preemptions_;
  // Back to the front of the queue: it arrived before anything still waiting behind it.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& w) { return w->arrival > victim->arrival; });
  waiting_.insert(pos, std::move(victim));
}

std::vector<ScheduledChunk> Scheduler::schedule(
    std::vector<std::unique_ptr<SequenceState>>& failed) {
  KvBlockManager& kv = engine_.kv();
  std::vector<ScheduledChunk> chunks;
  int64_t budget = config_.max_batched_tokens;

  // Running sequences: decoders first (one token each), then those still prefilling.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      SequenceState* s = running_[i].get();
      bool decoding = s->pending_tokens() == 1 && s->seq.n_cached >= s->n_prompt;
      if ((pass == 0) != decoding ||
          std::any_of(chunks.begin(), chunks.end(), [&](const auto& c) { return c.state == s; })) {
        ++i;
        continue;
      }
      int64_t n = std::min(s->pending_tokens(), budget);
      // Free blocks by preempting the youngest running sequences until this one fits.
      bool self_preempted = false;
      while (kv.blocks_needed(s->seq.block_table, s->seq.n_cached + n) > kv.available_blocks()) {
        size_t youngest = running_.size() - 1;
        if (running_[youngest].get() == s) {
          preempt(youngest);
          self_preempted = true;
          break;
        }
        SequenceState* victim = running_[youngest].get();
        auto it = std::find_if(chunks.begin(), chunks.end(),
                               [&](const auto& c) { return c.state == victim; });
        if (it != chunks.end()) {
          budget += it->n_tokens;
          chunks.erase(it);
        }
        preempt(youngest);
      }
      if (self_preempted) break;  // s was the youngest: nothing after it is running
      kv.reserve(s->seq.block_table, s->seq.n_cached + n);
      chunks.push_back({s, n, n == s->pending_tokens()});
      budget -= n;
      ++i;
    }
  }

  // Waiting sequences, first come first served, while budget, sequence slots and blocks last.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_sequences) {
    SequenceState* s = waiting_.front().get();
    if (!s->prefix_looked_up) {
      int64_t hit = engine_.attach_cached_prefix(s->seq, s->all_tokens);
      if (!s->scheduled_once) s->cached_prompt_tokens = std::min(hit, s->n_prompt);
      s->prefix_looked_up = true;
    }
    int64_t n = std::min(s->pending_tokens(), budget);
    if (kv.blocks_needed(s->seq.block_table, s->seq.n_cached + n) > kv.available_blocks()) {
      // Shrink the chunk to the blocks there are (whole blocks past what the table holds).
      int64_t capacity =
          (static_cast<int64_t>(s->seq.block_table.blocks.size()) + kv.available_blocks()) *
          kv.block_size();
      n = std::min(n, capacity - s->seq.n_cached);
      if (n <= 0) {
        if (running_.empty() && chunks.empty()) {
          // Even an empty pool cannot hold it: fail the request instead of waiting forever.
          std::unique_ptr<SequenceState> dead = std::move(waiting_.front());
          waiting_.pop_front();
          engine_.release(dead->seq);
          failed.push_back(std::move(dead));
          continue;
        }
        break;
      }
    }
    kv.reserve(s->seq.block_table, s->seq.n_cached + n);
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
  return chunks;
}

std::unique_ptr<SequenceState> Scheduler::remove(SequenceState* state) {
  std::unique_ptr<SequenceState> out;
  auto r = std::find_if(running_.begin(), running_.end(),
                        [&](const auto& p) { return p.get() == state; });
  if (r != running_.end()) {
    out = std::move(*r);
    running_.erase(r);
  } else {
    auto w = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& p) { return p.get() == state; });
    if (w == waiting_.end()) return nullptr;
    out = std::move(*w);
    waiting_.erase(w);
  }
  engine_.release(out->seq);
  return out;
}

}  // namespace ember
