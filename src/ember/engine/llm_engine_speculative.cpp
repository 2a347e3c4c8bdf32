// LLMEngine's speculative decoding (engine/speculative.h, engine/draft_proposer.h): guesses go into
// the decoders' token lists before the schedule, come out again where the schedule did not take
// them, and after the forward step each carrying sequence samples its rows in order and keeps the
// guesses its sampler chose. Every emitted token is the sampler's draw for its row, so the output
// does not change.
#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "ember/engine/llm_engine.h"

namespace ember {

void LLMEngine::propose_drafts() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Sequence*> asking;
  std::vector<DraftRequest> requests;
  for (const std::unique_ptr<Sequence>& ptr : scheduler_.running()) {
    Sequence& s = *ptr;
    if (!s.request.speculative || s.request.constraint || s.request.wants_prompt_rows() ||
        !s.prefilled() || s.pending_tokens() != 1 || s.n_draft != 0) {
      continue;
    }
    s.spec_step = true;
    if (s.spec_wait > 0) {  // recent guesses all failed: decode plainly for a while
      --s.spec_wait;
      continue;
    }
    // The step emits up to k + 1 tokens: all must fit max_tokens and the context.
    const int64_t room = std::min(s.max_tokens - s.n_generated(),
                                  max_request_tokens() - static_cast<int64_t>(s.tokens.size())) -
                         1;
    const int64_t want = s.spec_k > 0 ? s.spec_k : speculative_.draft_max;
    const int64_t k = std::min<int64_t>(want, room);
    if (k <= 0) continue;
    asking.push_back(&s);
    requests.push_back({s.id, s.tokens, k, {}, &s.block_table});
    if (draft_ && s.request.sampling.temperature > 0.0f) {
      requests.back().choose = [this, &s](std::span<const float> logits,
                                          std::span<const int32_t> tokens) {
        return draw_draft_guess(s, logits, tokens);
      };
    }
  }
  std::vector<std::vector<int32_t>> guesses;
  if (draft_ && !requests.empty()) {
    guesses = draft_->propose(requests);
  } else {
    for (const DraftRequest& r : requests) {
      guesses.push_back(propose_lookup(r.tokens, speculative_.lookup_ngram, r.k));
    }
  }
  for (size_t i = 0; i < asking.size(); ++i) {
    Sequence& s = *asking[i];
    s.tokens.insert(s.tokens.end(), guesses[i].begin(), guesses[i].end());
    s.n_draft = static_cast<int64_t>(guesses[i].size());
  }
  spec_stats_.propose_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int32_t LLMEngine::draw_draft_guess(Sequence& s, std::span<const float> logits,
                                    std::span<const int32_t> tokens) {
  if (!s.draft_sampler) {
    // The draft's draws come from a stream of their own, seeded from the request's seed.
    SamplingParams params = s.request.sampling;
    params.seed ^= 0x9E3779B97F4A7C15ull;
    s.draft_sampler = std::make_unique<Sampler>(params, static_cast<int32_t>(vocab_size()));
  }
  const auto q = s.draft_sampler->distribution(logits, tokens, static_cast<size_t>(s.n_prompt),
                                               banned_after(s, tokens.size()));
  s.draft_q.emplace_back(q.begin(), q.end());
  return draw_from(q, s.draft_sampler->uniform());
}

// A chunk covers tokens [n_cached, n_cached + n): guesses past its end are dropped, and a chunk
// that reaches the last sampled token now completes the sequence. Sequences left out of the step
// (or preempted by it) drop all their guesses.
void LLMEngine::settle_drafts(std::vector<ScheduledChunk>& chunks) {
  std::unordered_set<const Sequence*> scheduled;
  for (ScheduledChunk& c : chunks) {
    Sequence& s = *c.seq;
    scheduled.insert(&s);
    if (s.n_draft == 0) {
      if (s.spec_step) spec_stats_.count_step(0);  // a plain step (verify_drafts counts the rest)
      continue;
    }
    const int64_t real_end = static_cast<int64_t>(s.tokens.size()) - s.n_draft;
    const int64_t chunk_end = s.n_cached + c.n_tokens;
    if (chunk_end >= real_end) {
      s.tokens.resize(static_cast<size_t>(chunk_end));
      s.n_draft = chunk_end - real_end;
      c.completes = true;
    } else {
      s.tokens.resize(static_cast<size_t>(real_end));
      s.n_draft = 0;
      // The blocks a draft model took for the guesses' positions go back.
      scheduler_.truncate(s.block_table, s.window_table, real_end);
    }
    if (!s.draft_q.empty()) s.draft_q.resize(static_cast<size_t>(s.n_draft));
    if (s.n_draft == 0 && c.completes && s.spec_step) spec_stats_.count_step(0);  // all cut off
  }
  const auto strip = [&](Sequence& s) {
    s.spec_step = false;
    if (s.n_draft == 0 || scheduled.count(&s) != 0) return;
    s.tokens.resize(s.tokens.size() - static_cast<size_t>(s.n_draft));
    s.n_draft = 0;
    s.draft_q.clear();
    scheduler_.truncate(s.block_table, s.window_table, static_cast<int64_t>(s.tokens.size()));
  };
  for (const auto& s : scheduler_.running()) strip(*s);
  for (const auto& s : scheduler_.waiting()) strip(*s);
}

// rows: [1 + n_draft, vocab], row j predicting the token after position real_end - 1 + j.
void LLMEngine::verify_drafts(Sequence& s, std::span<const float> rows) {
  const auto V = static_cast<size_t>(vocab_size());
  const int64_t k = s.n_draft;
  const int64_t real_end = static_cast<int64_t>(s.tokens.size()) - k;
  std::vector<int32_t> chosen;
  if (!s.draft_q.empty()) {
    chosen = accept_sampled_drafts(s, rows);
  } else {
    for (int64_t j = 0; j <= k; ++j) {
      // Row j's history is everything before it: the real tokens and the j guesses kept so far,
      // which are still in s.tokens.
      const int32_t t = sample_token(s, rows.subspan(static_cast<size_t>(j) * V, V),
                                     static_cast<size_t>(real_end + j));
      chosen.push_back(t);
      if (j == k || t != s.tokens[static_cast<size_t>(real_end + j)]) break;
    }
  }
  const auto kept = static_cast<int64_t>(chosen.size()) - 1;
  ++spec_stats_.verify_steps;
  spec_stats_.count_step(k);
  spec_stats_.drafted += k;
  spec_stats_.accepted += kept;
  // Adapt: ask for one more guess than were kept (k + 1 after a full accept, up to --draft-max);
  // after a total miss, skip proposing for 1, 2, 4 ... 16 steps.
  s.spec_k = std::clamp<int64_t>(kept + 1, 1, speculative_.draft_max);
  if (kept == 0) {
    s.spec_backoff = std::min(16, std::max(1, 2 * s.spec_backoff));
    s.spec_wait = s.spec_backoff;
  } else {
    s.spec_backoff = 0;
  }
  // The cache holds the real tokens and all k guesses; keep the K/V of the kept ones only.
  s.tokens.resize(static_cast<size_t>(real_end));
  s.n_draft = 0;
  s.draft_q.clear();
  s.n_cached = real_end + kept;
  scheduler_.truncate(s.block_table, s.window_table, s.n_cached);
  for (size_t j = 0; j < chosen.size(); ++j) {
    if (!emit_token(s, chosen[j], rows.subspan(j * V, V))) return;  // finished: s is gone
  }
}

// Guess j (drawn from q_j by the draft) is kept with probability min(1, p_j / q_j), p_j being the
// request's sampling distribution on row j; the first rejection draws from max(0, p_j - q_j)
// instead and ends the step; after k kept guesses row k gives one more token, sampled as usual.
std::vector<int32_t> LLMEngine::accept_sampled_drafts(Sequence& s, std::span<const float> rows) {
  const auto V = static_cast<size_t>(vocab_size());
  const int64_t k = s.n_draft;
  const int64_t real_end = static_cast<int64_t>(s.tokens.size()) - k;
  std::vector<int32_t> chosen;
  for (int64_t j = 0; j < k; ++j) {
    const auto history = static_cast<size_t>(real_end + j);
    const auto p =
        s.sampler->distribution(rows.subspan(static_cast<size_t>(j) * V, V),
                                std::span<const int32_t>(s.tokens).first(history),
                                static_cast<size_t>(s.n_prompt), banned_after(s, history));
    const double u_accept = s.sampler->uniform();
    const double u_resample = s.sampler->uniform();
    const SpeculativeVerdict v = accept_or_resample(p, s.draft_q[static_cast<size_t>(j)],
                                                    s.tokens[history], u_accept, u_resample);
    chosen.push_back(v.token);
    if (!v.accepted) return chosen;
  }
  chosen.push_back(sample_token(s, rows.subspan(static_cast<size_t>(k) * V, V),
                                static_cast<size_t>(real_end + k)));
  return chosen;
}

}  // namespace ember
