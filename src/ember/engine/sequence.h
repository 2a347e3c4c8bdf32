// One request from arrival to finish: the one record the scheduler, the engine loop and the output
// stream read and update. tokens holds prompt + generated; the first n_cached of them have their
// K/V in the cache, through block_table.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "ember/engine/detokenizer.h"
#include "ember/engine/request.h"
#include "ember/engine/sampling/sampler.h"
#include "ember/kv/kv_block_table.h"

namespace ember {

struct Sequence {
  using Clock = std::chrono::steady_clock;

  int64_t id = 0;
  uint64_t arrival = 0;  // FCFS order
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;

  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t max_tokens = 0;  // resolved at arrival (GenerationRequest::max_tokens)
  int64_t n_cached = 0;    // tokens whose K/V are in the cache (a prefix of tokens)
  // --pp with steps in flight: chunks of this sequence launched whose logits have not come back
  // (n_cached already counts their tokens; their K/V is written by every stage in step order).
  int32_t chunks_in_flight = 0;
  // Speculative decoding: the last n_draft entries of tokens are a proposer's guesses for this
  // step, not yet sampled (engine/speculative.h); 0 outside a step.
  int64_t n_draft = 0;
  // Adaptive guessing: the guesses to ask for next (0: the engine's --draft-max), and how many more
  // steps to skip proposing after guesses were all rejected (the skip doubles, up to 16 steps).
  int64_t spec_k = 0;
  // A draft model sampling its guesses (temperature > 0): its own sampler (a seed of its own) and
  // the distribution q each of the n_draft guesses was drawn from, for the acceptance rule.
  std::unique_ptr<Sampler> draft_sampler;
  std::vector<std::vector<std::pair<float, int32_t>>> draft_q;
  int32_t spec_backoff = 0;
  int32_t spec_wait = 0;
  // Set by propose_drafts for a decode step this sequence could have guessed in (whether or not it
  // did), read and cleared by settle_drafts: the step counts in SpeculativeStats::steps_by_guesses.
  bool spec_step = false;
  KvBlockTable block_table;
  // Its table in the pool of the sliding-window layers when the model keeps them apart (Gemma
  // 2/3, backend/kv_cache.h): blocks before the window are -1 (given back); empty otherwise.
  KvBlockTable window_table;

  int64_t prompt_logit_rows_sent = 0;  // GenerationRequest::prompt_logits
  int64_t cached_prompt_tokens = 0;    // prompt tokens found in the prefix cache (first schedule)
  bool prefix_looked_up = false;
  bool scheduled_once = false;
  std::unique_ptr<Sampler> sampler;
  std::vector<uint8_t> allowed;  // request.constraint's mask for the next token (scratch)
  Detokenizer detokenizer;

  Clock::time_point arrival_time;
  Clock::time_point first_token_time;
  Clock::time_point last_token_time;

  int64_t n_generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  // Tokens not yet in the KV cache (>= 1 while the sequence is live).
  int64_t pending_tokens() const { return static_cast<int64_t>(tokens.size()) - n_cached; }
  bool prefilled() const { return n_cached >= n_prompt; }
};

inline double seconds_between(Sequence::Clock::time_point a, Sequence::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace ember
