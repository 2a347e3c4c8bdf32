// Continuous batching (the nano-vllm/vLLM split: the scheduler decides and owns the block manager,
// the model runner executes the step). KV blocks are reserved here and nowhere else. Each step
// fills a token budget: first one decode token for every running sequence, then the next prompt
// chunk of running sequences still prefilling, then new sequences from the waiting queue in arrival
// order (chunked prefill: a long prompt is split over steps so it never stalls the decodes). When
// the KV pool runs out, the youngest running sequence is preempted: its blocks are freed and it is
// recomputed later (its prefix may still be cached).
#pragma once

#include <climits>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "ember/engine/sequence.h"
#include "ember/kv/kv_block_manager.h"

namespace ember {

struct SchedulerConfig {
  int64_t max_batched_tokens = 512;  // tokens per forward step (decodes + prompt chunks)
  int64_t max_sequences = 64;        // running sequences at once
  // > 0 when every layer attends to only this many positions (Mistral, Phi-3): the blocks a
  // sequence's window has passed go back to the pool after each step, so its KV memory stays
  // bounded by the window however long it generates.
  int64_t sliding_window = 0;
  // > 0 when a model's sliding-window layers keep their K/V in a pool of their own (Gemma 2/3,
  // backend/kv_cache.h): each sequence's window table there gives back the blocks its window has
  // passed, while its main table keeps every position for the global layers.
  int64_t window_layers_window = 0;
  int64_t window_pool_blocks = 0;
};

// What one sequence runs in the next step: its next n_tokens pending tokens.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;  // the chunk's first position (seq->n_cached when it was scheduled)
  int64_t n_tokens = 0;
  bool completes = false;  // the chunk reaches the end of seq->tokens: sample after it
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, int64_t n_blocks, int64_t block_size,
            bool prefix_caching);

  void add(std::unique_ptr<Sequence> seq);
  // Decides the next step's chunks (of max_chunks sequences at most) and reserves their blocks.
  // Sequences that can never fit (a prompt larger than the whole pool) are moved to `failed`.
  // Under --pp with steps in flight (Sequence::chunks_in_flight), a sequence whose every token is
  // on its way is not scheduled, and one with a chunk on its way is never preempted.
  std::vector<ScheduledChunk> schedule(std::vector<std::unique_ptr<Sequence>>& failed,
                                       int64_t max_chunks = INT64_MAX);
  // After the step ran: the chunk's tokens are in the cache (registers full blocks for the prefix
  // cache; gives back the blocks behind a sliding window).
  void commit(const ScheduledChunk& chunk);
  // Removes a running or waiting sequence and frees its blocks (or leaves them in its block table,
  // for a session to keep).
  std::unique_ptr<Sequence> remove(Sequence* seq, bool keep_blocks = false);
  // A sequence's (or a session's kept) blocks, main and window tables: cut to the first n_tokens
  // positions, or given back.
  void truncate(KvBlockTable& table, KvBlockTable& window_table, int64_t n_tokens);
  // The longest cut <= n_tokens truncate() can make of these tables: a cut inside a block another
  // sequence shares (a cached prefix block) moves back to that block's start, since the block's
  // later positions would be rewritten under the other sequence.
  int64_t cut_point(const KvBlockTable& table, const KvBlockTable& window_table,
                    int64_t n_tokens) const;
  void release(KvBlockTable& table, KvBlockTable& window_table);
  // Whether tables holding n_tokens positions still hold every block a token at position n_tokens
  // attends to (a sliding window may have given back some the new token needs).
  bool can_resume(const KvBlockTable& table, const KvBlockTable& window_table,
                  int64_t n_tokens) const;

  const KvBlockManager& kv() const { return kv_; }
  // The main pool for a holder of K/V of its own in the same blocks (a draft model).
  KvBlockManager& kv_pool() { return kv_; }
  // The window layers' pool, null unless the model keeps them apart.
  const KvBlockManager* window_kv() const { return window_kv_ ? &*window_kv_ : nullptr; }
  void set_spill(KvBlockSpill* spill) { kv_.set_spill(spill); }
  void spill_cached() { kv_.spill_cached(); }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  void preempt(size_t running_index);
  void schedule_running(std::vector<ScheduledChunk>& chunks, int64_t& budget, int64_t max_chunks);
  void schedule_waiting(std::vector<ScheduledChunk>& chunks, int64_t& budget, int64_t max_chunks,
                        std::vector<std::unique_ptr<Sequence>>& failed);
  // Makes room for s's next n tokens by preempting the youngest running sequences from s on
  // (s itself last) that have no chunk in flight. Returns whether s may run now; false with
  // `s_preempted` when s went back to the waiting queue.
  bool make_room(Sequence* s, int64_t n, std::vector<ScheduledChunk>& chunks, int64_t& budget,
                 bool& s_preempted);
  void release(Sequence& seq);
  // Whether both pools can grow seq's tables to cover n_tokens positions, and growing them.
  bool fits(const Sequence& seq, int64_t n_tokens) const;
  void reserve(Sequence& seq, int64_t n_tokens);
  // The longest chunk (<= n) the pools' free blocks let a waiting sequence run.
  int64_t chunk_capacity(const Sequence& seq, int64_t n) const;
  // A waiting sequence's cached prefix in both pools (window pool: only the blocks its window
  // needs); returns the tokens cached.
  int64_t match_prefix(Sequence& seq);

  SchedulerConfig config_;
  KvBlockManager kv_;
  std::optional<KvBlockManager> window_kv_;
  std::vector<std::unique_ptr<Sequence>> running_;  // arrival order
  std::deque<std::unique_ptr<Sequence>> waiting_;   // arrival order (preempted ones first)
  uint64_t preemptions_ = 0;
};

}  // namespace ember
