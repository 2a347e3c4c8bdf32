// Continuous batching (the nano-vllm/vLLM split: the scheduler decides, KvBlockManager owns the
// blocks, Engine runs the step). Each step fills a token budget: first one decode token for every
// running sequence, then the next prompt chunk of running sequences still prefilling, then new
// sequences from the waiting queue in arrival order (chunked prefill: a long prompt is split over
// steps so it never stalls the decodes). When the KV pool runs out, the youngest running sequence
// is preempted: its blocks are freed and it is recomputed later (its prefix may still be cached).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "ember/engine/engine.h"
#include "ember/engine/request.h"
#include "ember/engine/sampler.h"
#include "ember/engine/stop_matcher.h"
#include "ember/tokenizer/utf8_stream.h"

namespace ember {

struct SchedulerConfig {
  int64_t max_batched_tokens = 512;  // tokens per forward step (decodes + prompt chunks)
  int64_t max_sequences = 64;        // running sequences at once
};

// A request in flight.
struct SequenceState {
  using Clock = std::chrono::steady_clock;

  int64_t id = 0;
  uint64_t arrival = 0;  // FCFS order
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  Sequence seq;                     // n_cached + block table; seq.tokens = tokens in the cache
  std::vector<int32_t> all_tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache (first schedule)
  bool prefix_looked_up = false;
  bool scheduled_once = false;
  std::unique_ptr<Sampler> sampler;
  Utf8StreamDecoder utf8;
  StopMatcher stop;
  Clock::time_point arrival_time;
  Clock::time_point last_token_time;

  // Tokens not yet in the KV cache (>= 1 while the sequence is live).
  int64_t pending_tokens() const { return static_cast<int64_t>(all_tokens.size()) - seq.n_cached; }
};

struct ScheduledChunk {
  SequenceState* state = nullptr;
  int64_t n_tokens = 0;
  bool completes = false;  // the chunk reaches the end of all_tokens: sample after it
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, Engine& engine);

  void add(std::unique_ptr<SequenceState> state);
  // Decides the next step's chunks and reserves their blocks. Sequences that can never fit (a
  // prompt larger than the whole pool) are moved to `failed`.
  std::vector<ScheduledChunk> schedule(std::vector<std::unique_ptr<SequenceState>>& failed);
  // Removes a running or waiting sequence and frees its blocks.
  std::unique_ptr<SequenceState> remove(SequenceState* state);

  const std::vector<std::unique_ptr<SequenceState>>& running() const { return running_; }
  const std::deque<std::unique_ptr<SequenceState>>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  void preempt(size_t running_index);

  SchedulerConfig config_;
  Engine& engine_;
  std::vector<std::unique_ptr<SequenceState>> running_;  // arrival order
  std::deque<std::unique_ptr<SequenceState>> waiting_;   // arrival order (preempted ones first)
  uint64_t preemptions_ = 0;
};

}  // namespace ember
