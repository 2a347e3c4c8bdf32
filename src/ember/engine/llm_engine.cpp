#include "ember/engine/llm_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ember/core/error.h"

namespace ember {

namespace {

constexpr int64_t kDefaultMaxTokens = 256;

Error too_long(const std::string& field, const std::string& message) {
  return Error::invalid_request(field, message).with_reason("context_length_exceeded");
}

// EOS plus the end-of-turn control tokens chat templates close a turn with (as llama.cpp's
// end-of-generation list): a token counts when the text encodes, with special tokens parsed, to
// exactly one id.
std::vector<int32_t> end_of_generation_tokens(const Tokenizer* tokenizer) {
  std::vector<int32_t> out;
  if (tokenizer == nullptr) return out;
  if (tokenizer->eos_id() >= 0) out.push_back(tokenizer->eos_id());
  for (const char* text :
       {"<end_of_turn>", "<|end|>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>"}) {
    const std::vector<int32_t> ids = tokenizer->encode_with_special(text, false, true);
    if (ids.size() == 1 && std::find(out.begin(), out.end(), ids[0]) == out.end()) {
      out.push_back(ids[0]);
    }
  }
  return out;
}

// The scheduler's settings, with the window whose passed blocks it gives back: in the one pool
// when every layer of the model slides, in the window layers' own pool when the runner keeps them
// apart from global layers (Gemma 2/3), whose blocks keep every position.
SchedulerConfig scheduler_config(const ModelWeights& weights, const LLMEngineOptions& options,
                                 const ModelRunner& runner) {
  SchedulerConfig s = options.scheduler;
  const ModelConfig& c = weights.config;
  // A draft model keeps its K/V in the same blocks and reads a new sequence's prompt from its
  // start when it first proposes: the blocks behind the window stay.
  if (options.engine.release_window_blocks && c.sliding_window > 0 &&
      c.sliding_window_pattern <= 1 && !options.speculative.uses_draft()) {
    s.sliding_window = c.sliding_window;
  }
  s.window_layers_window = runner.window_layers_window();
  s.window_pool_blocks = runner.window_pool_blocks();
  return s;
}

void check_speculative_options(const ModelWeights& weights, const LLMEngineOptions& options) {
  const SpeculativeOptions& spec = options.speculative;
  if (spec.lookup_ngram < 0 || spec.draft_max < 0 || spec.draft_max > 64) {
    throw Error::invalid_request("--draft-max",
                                 "--lookup must be >= 0 and --draft-max between 0 and 64");
  }
  if (spec.draft_layers < 0) {
    throw Error::invalid_request("--draft-layers", "--draft-layers must be >= 1");
  }
  if (spec.lookup_ngram > 0 && spec.uses_draft()) {
    throw Error::invalid_request("--lookup",
                                 "--lookup and a draft model (--draft, --draft-dtype, "
                                 "--draft-layers) are alternatives: choose one proposer");
  }
}

}  // namespace

EngineOptions runner_options(const LLMEngineOptions& options) {
  EngineOptions o = options.engine;
  o.max_step_tokens = options.scheduler.max_batched_tokens;
  o.max_draft_tokens = options.speculative.enabled() ? options.speculative.draft_max : 0;
  return o;
}

LLMEngine::LLMEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
                     const LLMEngineOptions& options)
    : before_forward_(options.before_forward),
      tokenizer_(tokenizer),
      end_of_generation_(end_of_generation_tokens(tokenizer)),
      runner_(weights, runner_options(options)),
      scheduler_(scheduler_config(weights, options, runner_), runner_.kv_shape().n_blocks,
                 runner_.kv_shape().block_size, options.engine.prefix_caching),
      speculative_(options.speculative) {
  check_speculative_options(weights, options);
  if (speculative_.enabled() && speculative_.uses_draft()) {
    const ModelWeights& draft = speculative_.draft != nullptr ? *speculative_.draft : weights;
    EngineOptions kv = options.engine;
    kv.max_context = runner_.max_context();
    draft_ = std::make_unique<DraftProposer>(draft, speculative_.draft_layers, kv,
                                             scheduler_.kv_pool(), vocab_size());
  }
  const KvTierOptions& tiers = options.engine.kv_tiers;
  if (tiers.enabled()) {
    if (!options.engine.prefix_caching) {
      throw Error::invalid_request("--kv-offload-ram",
                                   "KV offload tiers keep prefix blocks: they need prefix caching "
                                   "(on by default in serve; --no-prefix-cache turns it off)");
    }
    kv_tiers_ = std::make_unique<KvTierStore>(
        tiers, kv_fingerprint(weights.fingerprint, runner_.kv_shape()),
        runner_.kv_shape().bytes_per_block());
    kv_spill_ = std::make_unique<KvTierSpill>(*kv_tiers_, runner_.kv_storage());
    scheduler_.set_spill(kv_spill_.get());
  }
  update_gauges();
}

LLMEngine::~LLMEngine() {
  if (!kv_tiers_) return;
  try {
    scheduler_.spill_cached();
    kv_tiers_->persist();
  } catch (const std::exception& e) {  // a destructor must not throw; the tiers are a cache
    std::fprintf(stderr, "[ember] warning: KV offload tiers not saved: %s\n", e.what());
  }
  scheduler_.set_spill(nullptr);
}

void LLMEngine::spill_cached_blocks() {
  if (!kv_tiers_) return;
  scheduler_.spill_cached();
  update_gauges();
}

void LLMEngine::drop_disk_tier_page_cache() {
  if (kv_tiers_) kv_tiers_->drop_disk_page_cache();
}

KvTierStats LLMEngine::kv_tier_stats() const {
  return kv_tiers_ ? kv_tiers_->stats() : KvTierStats{};
}

int64_t LLMEngine::max_request_tokens() const {
  return std::min(runner_.max_context(), kv().n_blocks() * kv().block_size());
}

int64_t LLMEngine::kv_bytes_in_use() const {
  int64_t bytes = kv().used_blocks() * runner_.kv_shape().bytes_per_block();
  if (window_kv() != nullptr) {
    bytes += window_kv()->used_blocks() * runner_.window_kv_bytes_per_block();
  }
  return bytes;
}

std::unique_ptr<Sequence> LLMEngine::make_sequence(GenerationRequest request) const {
  const auto n_prompt = static_cast<int64_t>(request.prompt.size());
  const int64_t limit = max_request_tokens();
  if (n_prompt == 0) {
    throw Error::invalid_request("prompt", "the prompt has no tokens (enable BOS or give text)");
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab_size()) {
      throw Error::invalid_request("prompt", "token id " + std::to_string(t) +
                                                 " is outside the vocabulary (size " +
                                                 std::to_string(vocab_size()) + ")");
    }
  }
  if (n_prompt > limit || (n_prompt == limit && request.max_tokens != 0)) {
    throw too_long("prompt", "the prompt has " + std::to_string(n_prompt) +
                                 " tokens but the context holds " + std::to_string(limit));
  }
  int64_t max_tokens = request.max_tokens;
  if (max_tokens < 0) max_tokens = std::min(kDefaultMaxTokens, limit - n_prompt);
  if (request.stop_at_context) max_tokens = std::min(max_tokens, limit - n_prompt);
  // Compared as a difference: n_prompt + max_tokens overflows for max_tokens near 2^63 (a client's
  // "max_tokens": 9223372036854775807 used to pass this check and run to the end of the context).
  if (max_tokens > limit - n_prompt) {
    throw too_long("max_tokens",
                   "max_tokens " + std::to_string(max_tokens) + " + " + std::to_string(n_prompt) +
                       " prompt tokens exceed the context of " + std::to_string(limit) + " tokens");
  }
  for (const auto& [token, bias] : request.sampling.logit_bias) {
    if (token < 0 || token >= vocab_size()) {
      throw Error::invalid_request("logit_bias", "logit_bias token id " + std::to_string(token) +
                                                     " is outside the vocabulary (size " +
                                                     std::to_string(vocab_size()) + ")");
    }
  }
  if (request.min_tokens < 0 || request.min_tokens > max_tokens) {
    throw Error::invalid_request("min_tokens", "min_tokens " + std::to_string(request.min_tokens) +
                                                   " must be between 0 and max_tokens (" +
                                                   std::to_string(max_tokens) + ")");
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_.fetch_add(1);
  seq->arrival = next_arrival_.fetch_add(1);
  seq->tokens = request.prompt;
  seq->n_prompt = n_prompt;
  seq->max_tokens = max_tokens;
  seq->sampler = std::make_unique<Sampler>(request.sampling, static_cast<int32_t>(vocab_size()));
  seq->detokenizer = Detokenizer(tokenizer_, request.stop, request.strip_leading_space);
  seq->stream = std::make_shared<RequestStream>(seq->id);
  seq->request = std::move(request);
  if (seq->request.observer != nullptr) {  // an observed request computes all it shows
    seq->request.session = 0;
    seq->request.speculative = false;
  }
  seq->arrival_time = Sequence::Clock::now();
  return seq;
}

std::shared_ptr<RequestStream> LLMEngine::add(std::unique_ptr<Sequence> seq) {
  std::shared_ptr<RequestStream> stream = seq->stream;
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.requests_total;
    metrics_.prompt_tokens_total += static_cast<uint64_t>(seq->n_prompt);
  }
  if (seq->request.session != 0) resume_session(*seq);
  scheduler_.add(std::move(seq));
  return stream;
}

// The session's kept blocks become this sequence's, cut to the token prefix the two share (the
// prompt's last token always runs: its logits are needed).
void LLMEngine::resume_session(Sequence& seq) {
  auto it = sessions_.find(seq.request.session);
  if (it == sessions_.end()) return;
  SessionCache cache = std::move(it->second);
  sessions_.erase(it);
  int64_t common = 0;
  const auto limit = std::min<int64_t>(static_cast<int64_t>(cache.tokens.size()), seq.n_prompt - 1);
  while (common < limit &&
         cache.tokens[static_cast<size_t>(common)] == seq.tokens[static_cast<size_t>(common)]) {
    ++common;
  }
  common = scheduler_.cut_point(cache.table, cache.window_table, common);
  if (!scheduler_.can_resume(cache.table, cache.window_table, common)) {
    // A sliding window gave back blocks the next token reads: recompute.
    scheduler_.release(cache.table, cache.window_table);
    return;
  }
  scheduler_.truncate(cache.table, cache.window_table, common);
  seq.block_table = std::move(cache.table);
  seq.window_table = std::move(cache.window_table);
  seq.n_cached = common;
  seq.cached_prompt_tokens = common;
  seq.prefix_looked_up = true;
}

void LLMEngine::keep_session(Sequence* seq) {
  end_session(seq->request.session);
  std::unique_ptr<Sequence> done = scheduler_.remove(seq, /*keep_blocks=*/true);
  SessionCache& cache = sessions_[done->request.session];
  cache.table = std::move(done->block_table);
  cache.window_table = std::move(done->window_table);
  // A stop inside a step's kept guesses leaves tokens behind n_cached: keep what both cover.
  const auto kept = std::min<int64_t>(done->n_cached, static_cast<int64_t>(done->tokens.size()));
  cache.tokens.assign(done->tokens.begin(), done->tokens.begin() + kept);
}

void LLMEngine::end_session(int64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  scheduler_.release(it->second.table, it->second.window_table);
  sessions_.erase(it);
}

std::shared_ptr<RequestStream> LLMEngine::add_request(GenerationRequest request) {
  return add(make_sequence(std::move(request)));
}

void LLMEngine::drop_cancelled() {
  std::vector<Sequence*> gone;
  for (const auto& s : scheduler_.running())  // one with a chunk in flight: once it lands
    if (s->stream->cancelled() && s->chunks_in_flight == 0) gone.push_back(s.get());
  for (const auto& s : scheduler_.waiting())
    if (s->stream->cancelled()) gone.push_back(s.get());
  for (Sequence* s : gone) finish(s, FinishReason::Cancelled);
}

void LLMEngine::finish_all(FinishReason reason, const std::string& error) {
  drop_steps_in_flight();
  std::vector<Sequence*> all;
  for (const auto& s : scheduler_.running()) all.push_back(s.get());
  for (const auto& s : scheduler_.waiting()) all.push_back(s.get());
  for (Sequence* s : all) finish(s, reason, error);
}

void LLMEngine::fail_unfittable(std::vector<std::unique_ptr<Sequence>>& failed) {
  for (auto& f : failed) {
    StreamEvent e;
    e.finished = true;
    e.finish_reason = FinishReason::Error;
    e.error = "the prompt does not fit in the KV cache";
    e.prompt_tokens = f->n_prompt;
    f->stream->push(std::move(e));
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.requests_finished;
  }
}

bool LLMEngine::step() {
  if (runner_.steps_in_flight() > 1 && !speculative_.enabled()) return step_pipelined();
  drop_cancelled();
  if (scheduler_.idle()) {
    update_gauges();
    return false;
  }
  if (speculative_.enabled()) propose_drafts();
  std::vector<std::unique_ptr<Sequence>> failed;
  std::vector<ScheduledChunk> chunks = scheduler_.schedule(failed);
  if (speculative_.enabled()) settle_drafts(chunks);
  fail_unfittable(failed);
  if (chunks.empty()) {
    update_gauges();
    return !failed.empty();
  }
  build_batch(chunks);
  const auto forward_start = Sequence::Clock::now();
  ForwardObserver* observer = observe_step(chunks);
  runner_.set_observer(observer);
  if (before_forward_) before_forward_(batch_);
  const std::span<const float> logits = runner_.run(batch_);
  if (observer != forward_observer_) runner_.set_observer(forward_observer_);
  if (std::any_of(chunks.begin(), chunks.end(), [](const auto& c) { return c.seq->n_draft > 0; })) {
    spec_stats_.verify_seconds += seconds_between(forward_start, Sequence::Clock::now());
  }
  for (const ScheduledChunk& c : chunks) scheduler_.commit(c);
  // The step's counters (steps, tokens routed to experts) are published before its tokens reach
  // the clients, so /metrics read after a response already counts the work behind it.
  {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    ++metrics_.steps_total;
    publish_expert_load();
  }
  deliver(chunks, logits);
  update_gauges();
  return true;
}

// The step's tokens, sequence after sequence; logits for a chunk's last token when it completes
// the sequence (to sample), and for every prompt position of a scoring request.
void LLMEngine::build_batch(const std::vector<ScheduledChunk>& chunks) {
  batch_.clear();
  for (const ScheduledChunk& c : chunks) {
    const Sequence& s = *c.seq;
    const auto first_row = static_cast<int32_t>(batch_.tokens.size());
    const auto begin = s.tokens.begin() + s.n_cached;
    batch_.tokens.insert(batch_.tokens.end(), begin, begin + c.n_tokens);
    batch_.sequences.push_back(
        {s.block_table.blocks.data(), s.n_cached, c.n_tokens, s.window_table.blocks.data()});
    const bool prompt_chunk = !s.prefilled();
    const bool all_rows = s.request.wants_prompt_logit_rows() && prompt_chunk;
    // A chunk with guesses: a row for the last sampled token and one per guess.
    const int64_t last_rows = c.completes ? 1 + s.n_draft : 0;
    for (int64_t i = 0; i < c.n_tokens; ++i) {
      if (all_rows || i >= c.n_tokens - last_rows) {
        batch_.logit_rows.push_back(first_row + static_cast<int32_t>(i));
      }
      if (s.request.prompt_hidden && prompt_chunk) {
        batch_.hidden_rows.push_back(first_row + static_cast<int32_t>(i));
      }
    }
  }
}

// Hands each chunk's logits rows to its sequence: prompt rows to a scoring stream, the last row to
// the sampler. The rows follow build_batch's order.
void LLMEngine::deliver(const std::vector<ScheduledChunk>& chunks, std::span<const float> logits) {
  const auto V = static_cast<size_t>(vocab_size());
  const auto D = static_cast<size_t>(runner_.weights().config.d_model);
  const std::span<const float> hidden = runner_.hidden_states();
  size_t row = 0;
  size_t hidden_row = 0;
  for (const ScheduledChunk& c : chunks) {
    Sequence& s = *c.seq;
    const int64_t start = c.start;
    const bool prompt_chunk = start < s.n_prompt;
    const bool all_rows = s.request.wants_prompt_logit_rows() && prompt_chunk;
    const auto n_rows =
        static_cast<size_t>(all_rows ? c.n_tokens : (c.completes ? 1 + s.n_draft : 0));
    const std::span<const float> rows = logits.subspan(row * V, n_rows * V);
    row += n_rows;
    // A preempted sequence recomputes its prompt: rows already sent are not sent again.
    const int64_t skip = std::max<int64_t>(0, s.prompt_logit_rows_sent - start);
    const size_t n_hidden =
        s.request.prompt_hidden && prompt_chunk ? static_cast<size_t>(c.n_tokens) : 0;
    const std::span<const float> hidden_rows = hidden.subspan(hidden_row * D, n_hidden * D);
    hidden_row += n_hidden;
    if ((all_rows || n_hidden > 0) && skip < c.n_tokens) {
      StreamEvent e;
      if (n_hidden > 0) {
        e.prompt_hidden.assign(hidden_rows.begin() + static_cast<std::ptrdiff_t>(skip * D),
                               hidden_rows.end());
      }
      if (s.request.prompt_logits) {
        e.prompt_logits.assign(rows.begin() + static_cast<std::ptrdiff_t>(skip * V), rows.end());
      }
      if (s.request.prompt_logprobs >= 0) {  // row i predicts prompt token start + i + 1
        for (int64_t i = skip; i < c.n_tokens && start + i + 1 < s.n_prompt; ++i) {
          e.prompt_logprobs.push_back(logprob_of(rows.subspan(static_cast<size_t>(i) * V, V),
                                                 s.tokens[static_cast<size_t>(start + i + 1)],
                                                 s.request.prompt_logprobs));
        }
      }
      s.prompt_logit_rows_sent = start + c.n_tokens;
      s.stream->push(std::move(e));
    }
    if (c.completes && s.n_draft > 0) {
      verify_drafts(s, rows);
    } else if (c.completes) {
      sample_next(s, rows.subspan(rows.size() - V, V));
    }
  }
}

// The step's observer: the first scheduled request that has one (its rows are
// batch_.observed_sequence's), else the engine's own (set_forward_observer), else none.
ForwardObserver* LLMEngine::observe_step(const std::vector<ScheduledChunk>& chunks) {
  observed_ = nullptr;
  step_observer_ = nullptr;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].seq->request.observer != nullptr) {
      batch_.observed_sequence = static_cast<int32_t>(i);
      observed_ = chunks[i].seq;
      return step_observer_ = chunks[i].seq->request.observer.get();
    }
  }
  if (forward_observer_ != nullptr && chunks.size() == 1) observed_ = chunks[0].seq;
  return step_observer_ = forward_observer_;
}

void LLMEngine::update_gauges() {
  const KvBlockManager& kv = scheduler_.kv();
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  metrics_.running = static_cast<int64_t>(scheduler_.running().size());
  metrics_.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  metrics_.kv_blocks_total = kv.n_blocks();
  metrics_.kv_blocks_used = kv.used_blocks();
  metrics_.kv_blocks_cached = kv.cached_blocks();
  metrics_.kv_blocks_free = kv.available_blocks() - kv.cached_blocks();
  metrics_.kv_side_bytes = runner_.kv_side_bytes();
  if (const KvBlockManager* w = window_kv(); w != nullptr) {
    metrics_.kv_window_pool = true;
    metrics_.kv_window_blocks_total = w->n_blocks();
    metrics_.kv_window_blocks_used = w->used_blocks();
    metrics_.kv_window_blocks_cached = w->cached_blocks();
    metrics_.kv_window_blocks_free = w->available_blocks() - w->cached_blocks();
  }
  metrics_.prefix_queried_blocks = kv.stats().queried_blocks;
  metrics_.prefix_hit_blocks = kv.stats().hit_blocks;
  metrics_.prefix_restored_blocks = kv.stats().restored_blocks;
  metrics_.kv_spilled_blocks = kv.stats().spilled_blocks;
  metrics_.kv_offload = kv_tiers_ != nullptr;
  if (kv_tiers_) metrics_.kv_tiers = kv_tiers_->stats();
  metrics_.preemptions_total = scheduler_.preemptions();
  metrics_.speculative = speculative_.enabled();
  metrics_.spec = spec_stats_;
  publish_expert_load();
}

void LLMEngine::publish_expert_load() {
  const std::span<const int64_t> load = runner_.expert_load();
  if (load.empty()) return;
  const int64_t E = runner_.weights().config.n_experts;
  metrics_.expert_tokens.assign(static_cast<size_t>(E), 0);
  for (size_t i = 0; i < load.size(); ++i) metrics_.expert_tokens[i % E] += load[i];
}

ServingMetrics LLMEngine::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  return metrics_;
}

void run_until_finished(LLMEngine& engine, RequestStream& stream,
                        const std::function<void(StreamEvent&)>& on_event) {
  for (;;) {
    const bool worked = engine.step();
    while (std::optional<StreamEvent> e = stream.pop(std::chrono::milliseconds(0))) {
      on_event(*e);
      if (e->finished) return;
    }
    if (!worked) throw Error("engine: idle before the request finished");
  }
}

}  // namespace ember
