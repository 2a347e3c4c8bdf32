// Continuous batching (the nano-vllm/vLLM split: the scheduler decides and owns the block manager,
// the model runner executes the step). KV blocks are reserved here and nowhere else. Each step
// fills a token budget: first one decode token for every running sequence, then the next prompt
// chunk of running sequences still prefilling, then new sequences from the waiting queue in arrival
// order (chunked prefill: a long prompt is split over steps so it never stalls the decodes). When
// the KV pool runs out, the youngest running sequence is preempted: its blocks are freed and it is
// recomputed later (its prefix may still be cached).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
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
};

// What one sequence runs in the next step: its next n_tokens pending tokens.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;
  bool completes = false;  // the chunk reaches the end of seq->tokens: sample after it
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, int64_t n_blocks, int64_t block_size,
            bool prefix_caching);

  void add(std::unique_ptr<Sequence> seq);
  // Decides the next step's chunks and reserves their blocks. Sequences that can never fit (a
  // prompt larger than the whole pool) are moved to `failed`.
  std::vector<ScheduledChunk> schedule(std::vector<std::unique_ptr<Sequence>>& failed);
  // After the step ran: the chunk's tokens are in the cache (registers full blocks for the prefix
  // cache; gives back the blocks behind a sliding window).
  void commit(const ScheduledChunk& chunk);
  // Removes a running or waiting sequence and frees its blocks (or leaves them in its block table,
  // for a session to keep).
  std::unique_ptr<Sequence> remove(Sequence* seq, bool keep_blocks = false);
  // A session's kept blocks: cut to the first n_tokens positions, or given back.
  void truncate(KvBlockTable& table, int64_t n_tokens) { kv_.truncate(table, n_tokens); }
  void release(KvBlockTable& table) { kv_.release(table); }

  const KvBlockManager& kv() const { return kv_; }
  void set_spill(KvBlockSpill* spill) { kv_.set_spill(spill); }
  void spill_cached() { kv_.spill_cached(); }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  void preempt(size_t running_index);
  void schedule_running(std::vector<ScheduledChunk>& chunks, int64_t& budget);
  void schedule_waiting(std::vector<ScheduledChunk>& chunks, int64_t& budget,
                        std::vector<std::unique_ptr<Sequence>>& failed);
  void release(Sequence& seq);

  SchedulerConfig config_;
  KvBlockManager kv_;
  std::vector<std::unique_ptr<Sequence>> running_;  // arrival order
  std::deque<std::unique_ptr<Sequence>> waiting_;   // arrival order (preempted ones first)
  uint64_t preemptions_ = 0;
};

}  // namespace ember
