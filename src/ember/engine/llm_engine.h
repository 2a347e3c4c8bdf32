// The one generation loop. Every command that generates or scores (run, chat, serve through
// AsyncEngine, bench, score) adds requests and calls step():
//   schedule (Scheduler: which tokens of which sequences, KV blocks reserved)
//   -> forward (ModelRunner: one Batch through the model)
//   -> sample (each sequence's Sampler on its logits row)
//   -> update (Detokenizer text and stop strings, max_tokens / EOS / context, events to the
//   stream).
// A request is one Sequence from add_request() to its final event. Not thread-safe: one thread
// drives it (AsyncEngine's loop for the server); metrics() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/backend/batch.h"
#include "ember/engine/draft_proposer.h"
#include "ember/engine/metrics.h"
#include "ember/engine/model_runner.h"
#include "ember/engine/request.h"
#include "ember/engine/scheduler.h"
#include "ember/engine/sequence.h"
#include "ember/engine/speculative.h"
#include "ember/kv/kv_tier_spill.h"
#include "ember/kv/kv_tier_store.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

struct LLMEngineOptions {
  EngineOptions engine;            // context, KV pool size, block size, prefix caching, KV dtype
  SchedulerConfig scheduler;       // token budget, max sequences
  SpeculativeOptions speculative;  // proposer for speculative decoding (off by default)
  // Called with each step's batch just before the forward pass runs it: serve --tp/--pp's rank 0
  // sends the step to the ranks that follow it (parallel/step_mirror.h). Empty: none.
  std::function<void(const Batch&)> before_forward;
};

// The options LLMEngine builds its ModelRunner with (the step and guess sizes that size a window
// layers' pool added): what a rank that only runs the steps rank 0 sends must build too.
EngineOptions runner_options(const LLMEngineOptions& options);

class LLMEngine {
 public:
  // tokenizer may be null: no text (token ids only) and no EOS stop.
  LLMEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
            const LLMEngineOptions& options);
  // With offload tiers: spills the cached blocks and persists the RAM tier to disk, so that a
  // restarted engine finds the prefixes this one computed.
  ~LLMEngine();
  LLMEngine(const LLMEngine&) = delete;
  LLMEngine& operator=(const LLMEngine&) = delete;

  // Checks a request and makes its Sequence; the one place where a request's max_tokens and
  // context fit are decided. Throws ember::Error (InvalidArgument naming the field, with reason
  // "context_length_exceeded" when it cannot fit) when refused. Thread-safe.
  std::unique_ptr<Sequence> make_sequence(GenerationRequest request) const;
  // Queues a sequence made by make_sequence; returns its stream.
  std::shared_ptr<RequestStream> add(std::unique_ptr<Sequence> seq);
  std::shared_ptr<RequestStream> add_request(GenerationRequest request);

  // Gives back the K/V a session kept (GenerationRequest::session).
  void end_session(int64_t session);

  // One schedule -> forward -> sample -> update step. Returns false when there was nothing to do.
  // Under --pp with steps in flight (EngineOptions::pipeline_in_flight), a step launches the next
  // batch while earlier ones are still in the later stages, and samples the oldest batch once as
  // many are in flight as the runner takes (or nothing else can run): the running sequences are
  // spread over the batches in flight, so each stage works on one of them at a time.
  bool step();
  bool idle() const { return scheduler_.idle(); }
  // Finishes every request in flight with `reason` (an engine failure, shutdown).
  void finish_all(FinishReason reason, const std::string& error = "");

  ServingMetrics metrics() const;
  int64_t waiting() const { return static_cast<int64_t>(scheduler_.waiting().size()); }
  int64_t max_context() const { return runner_.max_context(); }
  // Largest prompt + generation one request may hold.
  int64_t max_request_tokens() const;
  int64_t vocab_size() const { return runner_.vocab_size(); }
  const ModelRunner& runner() const { return runner_; }
  // Shows the following steps' forward passes to `observer` (ember trace; null: none). A request
  // with an observer of its own (GenerationRequest::observer) has its steps shown to that one.
  void set_forward_observer(ForwardObserver* observer) {
    forward_observer_ = observer;
    runner_.set_observer(observer);
  }
  const KvBlockManager& kv() const { return scheduler_.kv(); }
  // The sliding-window layers' pool when the model keeps them apart (Gemma 2/3), else null.
  const KvBlockManager* window_kv() const { return scheduler_.window_kv(); }
  int64_t kv_bytes_in_use() const;
  // Moves every cached block no sequence holds out of the pool into the offload tiers (bench: a
  // prefix restored from a tier; shutdown). No-op without tiers.
  void spill_cached_blocks();
  // Drops the disk tier's files from the OS page cache (bench: a restore that reads the disk).
  void drop_disk_tier_page_cache();
  const SpeculativeStats& speculative_stats() const { return spec_stats_; }
  const SpeculativeOptions& speculative_options() const { return speculative_; }
  // The draft model's proposer (null without one).
  const DraftProposer* draft() const { return draft_.get(); }
  // The tiers' counters (zeros without tiers).
  KvTierStats kv_tier_stats() const;

 private:
  void drop_cancelled();
  // --pp with steps in flight (llm_engine_pipelined.cpp): step() as launch and collect; a step
  // launched and the sequences it carries, until its logits are back; drop_steps_in_flight
  // collects and forgets them all (finish_all).
  bool step_pipelined();
  void launch_step(std::vector<ScheduledChunk> chunks);
  void collect_step();
  void drop_steps_in_flight();
  struct StepInFlight {
    std::vector<ScheduledChunk> chunks;
  };
  std::deque<StepInFlight> steps_in_flight_;
  void fail_unfittable(std::vector<std::unique_ptr<Sequence>>& failed);
  void build_batch(const std::vector<ScheduledChunk>& chunks);
  void deliver(const std::vector<ScheduledChunk>& chunks, std::span<const float> logits);
  void sample_next(Sequence& s, std::span<const float> logits);
  // The sampler's token for `logits`, with the first `history` of s.tokens as the history.
  int32_t sample_token(Sequence& s, std::span<const float> logits, size_t history);
  // Tokens the sampler may not pick after `history` tokens (min_tokens holds back the
  // end-of-generation ones).
  std::span<const int32_t> banned_after(const Sequence& s, size_t history) const;
  // Appends a sampled token and sends it (text, logprobs); finishes the sequence at EOS, a stop
  // string, max_tokens or the context. Returns false when the sequence finished (it is gone).
  bool emit_token(Sequence& s, int32_t token, std::span<const float> logits);
  // Speculative decoding (llm_engine_speculative.cpp): guesses appended to the decoders' tokens
  // before scheduling; guesses the schedule did not take removed after it; and the rows of a
  // chunk that carried guesses sampled in order, keeping what matched.
  void propose_drafts();
  void settle_drafts(std::vector<ScheduledChunk>& chunks);
  void verify_drafts(Sequence& s, std::span<const float> rows);
  // The tokens verify_drafts keeps of the guesses of a draft that sampled them (s.draft_q):
  // the accepted guesses, then the resampled or bonus token.
  std::vector<int32_t> accept_sampled_drafts(Sequence& s, std::span<const float> rows);
  // The draft's choice of a sampled request's next guess: a draw from the draft's distribution.
  int32_t draw_draft_guess(Sequence& s, std::span<const float> logits,
                           std::span<const int32_t> tokens);
  void finish(Sequence* s, FinishReason reason, const std::string& error = "");
  ForwardObserver* observe_step(const std::vector<ScheduledChunk>& chunks);
  void update_gauges();
  // metrics_.expert_tokens from the runner's expert load (metrics_mutex_ held).
  void publish_expert_load();
  void resume_session(Sequence& seq);
  void keep_session(Sequence* seq);

  // What a session kept of its last request: the blocks and the tokens whose K/V they hold.
  struct SessionCache {
    KvBlockTable table;
    KvBlockTable window_table;
    std::vector<int32_t> tokens;
  };

  std::function<void(const Batch&)> before_forward_;
  const Tokenizer* tokenizer_;
  // Tokens that end a generation: EOS, and the end-of-turn tokens of chat templates whose turns do
  // not end with EOS (Gemma's <end_of_turn>, Phi-3's <|end|>, ...) when the vocabulary has them.
  std::vector<int32_t> end_of_generation_;
  ModelRunner runner_;
  Scheduler scheduler_;
  std::unique_ptr<KvTierStore> kv_tiers_;  // offload tiers, when configured
  std::unique_ptr<KvTierSpill> kv_spill_;
  SpeculativeOptions speculative_;
  std::unique_ptr<DraftProposer> draft_;         // the draft model, when speculation uses one
  ForwardObserver* forward_observer_ = nullptr;  // set_forward_observer
  // This step's observer and the sequence it observes (its sampling is reported too).
  ForwardObserver* step_observer_ = nullptr;
  const Sequence* observed_ = nullptr;
  SpeculativeStats spec_stats_;  // engine thread; copied into metrics_ by update_gauges
  Batch batch_;
  std::unordered_map<int64_t, SessionCache> sessions_;
  mutable std::atomic<int64_t> next_id_{1};
  mutable std::atomic<uint64_t> next_arrival_{0};
  mutable std::mutex metrics_mutex_;
  ServingMetrics metrics_;
};

// Steps `engine` until the request behind `stream` has finished, handing each of its events to
// on_event in order (single-request commands: run, chat, score).
void run_until_finished(LLMEngine& engine, RequestStream& stream,
                        const std::function<void(StreamEvent&)>& on_event);

}  // namespace ember
