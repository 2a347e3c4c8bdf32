#include "ember/engine/serving_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ember/core/error.h"

namespace ember {

namespace {

double seconds_between(SequenceState::Clock::time_point a, SequenceState::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// log-softmax of the chosen token and the `top_n` most likely alternatives.
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int32_t top_n) {
  double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float z : logits) sum += std::exp(z - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - log_z);
  if (top_n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    size_t n = std::min(ids.size(), static_cast<size_t>(top_n));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < n; ++i)
      lp.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_z));
  }
  return lp;
}

}  // namespace

ServingEngine::ServingEngine(const ModelWeights& weights, const Tokenizer* tokenizer,
                             const ServingOptions& options)
    : tokenizer_(tokenizer),
      options_(options),
      engine_(weights, options.engine),
      scheduler_(options.scheduler, engine_) {
  update_gauges();
}

ServingEngine::~ServingEngine() {
  shutdown(/*cancel_in_flight=*/true);
}

int64_t ServingEngine::max_request_tokens() const {
  return std::min(engine_.max_context(), engine_.kv().n_blocks() * engine_.kv().block_size());
}

std::shared_ptr<RequestStream> ServingEngine::submit(GenerationRequest request, SubmitError* error,
                                                     std::string* message) {
  auto refuse = [&](SubmitError e, std::string m) -> std::shared_ptr<RequestStream> {
    if (error) *error = e;
    if (message) *message = std::move(m);
    return nullptr;
  };
  if (request.prompt.empty()) return refuse(SubmitError::EmptyPrompt, "the prompt has no tokens");
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt + request.max_tokens > max_request_tokens()) {
    return refuse(SubmitError::TooLong,
                  "this request needs " + std::to_string(n_prompt + request.max_tokens) +
                      " tokens (" + std::to_string(n_prompt) + " in the prompt + " +
                      std::to_string(request.max_tokens) + " max_tokens) but the context holds " +
                      std::to_string(max_request_tokens()));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= engine_.vocab_size()) {
      return refuse(SubmitError::EmptyPrompt,
                    "token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  auto state = std::make_unique<SequenceState>();
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) return refuse(SubmitError::ShuttingDown, "the server is shutting down");
    if (metrics_.waiting + static_cast<int64_t>(inbox_.size()) >= options_.max_waiting) {
      ++metrics_.requests_rejected;
      return refuse(SubmitError::QueueFull, "too many requests are waiting; try again later");
    }
    state->id = next_id_++;
    state->arrival = next_arrival_++;
    ++metrics_.requests_total;
    metrics_.prompt_tokens_total += static_cast<uint64_t>(n_prompt);
  }
  stream = std::make_shared<RequestStream>(state->id);
  state->stream = stream;
  state->all_tokens = request.prompt;
  state->n_prompt = n_prompt;
  state->sampler =
      std::make_unique<Sampler>(request.sampling, static_cast<int32_t>(engine_.vocab_size()));
  state->stop = StopMatcher(request.stop);
  state->request = std::move(request);
  state->arrival_time = SequenceState::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_.push_back(std::move(state));
  }
  wake_.notify_all();
  if (error) *error = SubmitError::None;
  return stream;
}

void ServingEngine::admit_inbox() {
  std::vector<std::unique_ptr<SequenceState>> incoming;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(inbox_);
  }
  for (auto& s : incoming) scheduler_.add(std::move(s));
}

void ServingEngine::drop_cancelled() {
  std::vector<SequenceState*> gone;
  bool all = cancel_all_.load();
  for (const auto& s : scheduler_.running()) {
    if (all || s->stream->cancelled()) gone.push_back(s.get());
  }
  for (const auto& s : scheduler_.waiting()) {
    if (all || s->stream->cancelled()) gone.push_back(s.get());
  }
  for (SequenceState* s : gone) finish(s, FinishReason::Cancelled);
}

bool ServingEngine::step() {
  admit_inbox();
  drop_cancelled();
  if (scheduler_.idle()) {
    update_gauges();
    return false;
  }
  std::vector<std::unique_ptr<SequenceState>> failed;
  std::vector<ScheduledChunk> chunks = scheduler_.schedule(failed);
  for (auto& f : failed) {
    StreamEvent e;
    e.finished = true;
    e.finish_reason = FinishReason::Error;
    e.error = "the prompt does not fit in the KV cache";
    e.prompt_tokens = f->n_prompt;
    f->stream->push(std::move(e));
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.requests_finished;
  }
  if (chunks.empty()) {
    update_gauges();
    return !failed.empty();
  }
  std::vector<FeedRequest> requests;
  requests.reserve(chunks.size());
  for (const ScheduledChunk& c : chunks) {
    SequenceState& s = *c.state;
    auto tokens =
        std::span<const int32_t>(s.all_tokens)
            .subspan(static_cast<size_t>(s.seq.n_cached), static_cast<size_t>(c.n_tokens));
    requests.push_back({&s.seq, tokens, false, c.completes});
  }
  std::span<const float> logits = engine_.feed(requests);
  const size_t V = static_cast<size_t>(engine_.vocab_size());
  size_t row = 0;
  for (const ScheduledChunk& c : chunks) {
    if (!c.completes) continue;
    handle_token(*c.state, logits.subspan(row * V, V));
    ++row;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.steps_total;
  }
  update_gauges();
  return true;
}

void ServingEngine::handle_token(SequenceState& s, std::span<const float> logits) {
  const GenerationRequest& req = s.request;
  std::span<const float> row = logits;
  if (req.presence_penalty != 0.0f || req.frequency_penalty != 0.0f) {
    // OpenAI semantics over the generated tokens: z -= presence * [count > 0] + frequency * count.
    penalised_.assign(logits.begin(), logits.end());
    std::vector<std::pair<int32_t, int32_t>> counts;
    std::vector<int32_t> generated(s.all_tokens.begin() + s.n_prompt, s.all_tokens.end());
    std::sort(generated.begin(), generated.end());
    for (size_t i = 0; i < generated.size();) {
      size_t j = i;
      while (j < generated.size() && generated[j] == generated[i]) ++j;
      penalised_[static_cast<size_t>(generated[i])] -=
          req.presence_penalty + req.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
    row = penalised_;
  }
  int32_t token = s.sampler->sample(row, s.all_tokens);
  auto now = SequenceState::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s.n_generated == 0) {
      metrics_.ttft_seconds.observe(seconds_between(s.arrival_time, now));
    } else {
      metrics_.inter_token_seconds.observe(seconds_between(s.last_token_time, now));
    }
  }
  s.last_token_time = now;
  const int32_t eos = tokenizer_ ? tokenizer_->eos_id() : -1;
  if (token == eos && !req.ignore_eos) {
    finish(&s, FinishReason::Stop);
    return;
  }
  StreamEvent e;
  e.tokens.push_back(token);
  if (req.logprobs >= 0) e.logprobs.push_back(logprob_of(row, token, req.logprobs));
  s.all_tokens.push_back(token);
  ++s.n_generated;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.generation_tokens_total;
  }
  bool matched = false;
  std::string text = s.utf8.push(tokenizer_ ? tokenizer_->token_bytes(token) : std::string());
  e.text = s.stop.push(text, &matched);
  s.stream->push(std::move(e));
  if (matched) {
    finish(&s, FinishReason::Stop);
  } else if (s.n_generated >= req.max_tokens ||
             static_cast<int64_t>(s.all_tokens.size()) >= max_request_tokens()) {
    finish(&s, FinishReason::Length);
  }
}

void ServingEngine::finish(SequenceState* s, FinishReason reason, const std::string& error) {
  StreamEvent e;
  e.finished = true;
  e.finish_reason = reason;
  e.error = error;
  if (reason != FinishReason::Cancelled && !s->stop.matched()) {
    bool matched = false;
    e.text = s->stop.push(s->utf8.flush(), &matched);
    if (!matched)
      e.text += s->stop.flush();
    else
      e.finish_reason = FinishReason::Stop;
  }
  e.prompt_tokens = s->n_prompt;
  e.completion_tokens = s->n_generated;
  e.cached_prompt_tokens = s->cached_prompt_tokens;
  s->stream->push(std::move(e));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.requests_finished;
    if (reason == FinishReason::Cancelled) ++metrics_.requests_cancelled;
  }
  scheduler_.remove(s);  // frees the blocks; the state is destroyed here
}

void ServingEngine::update_gauges() {
  const KvBlockManager& kv = engine_.kv();
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.running = static_cast<int64_t>(scheduler_.running().size());
  metrics_.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  metrics_.kv_blocks_total = kv.n_blocks();
  metrics_.kv_blocks_used = kv.used_blocks();
  metrics_.kv_blocks_cached = kv.cached_blocks();
  metrics_.kv_blocks_free = kv.available_blocks() - kv.cached_blocks();
  metrics_.prefix_queried_blocks = kv.stats().queried_blocks;
  metrics_.prefix_hit_blocks = kv.stats().hit_blocks;
  metrics_.preemptions_total = scheduler_.preemptions();
}

ServingMetrics ServingEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return metrics_;
}

void ServingEngine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void ServingEngine::loop() {
  for (;;) {
    bool worked = false;
    try {
      worked = step();
    } catch (const std::exception& ex) {
      // A failed step must not leave clients hanging: fail everything in flight.
      std::fprintf(stderr, "[ember] engine step failed: %s\n", ex.what());
      std::vector<SequenceState*> all;
      for (const auto& s : scheduler_.running()) all.push_back(s.get());
      for (const auto& s : scheduler_.waiting()) all.push_back(s.get());
      for (SequenceState* s : all) finish(s, FinishReason::Error, ex.what());
    }
    if (worked) continue;
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_.load() && inbox_.empty() && scheduler_.idle()) return;
    wake_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return !inbox_.empty() || stop_.load(); });
  }
}

void ServingEngine::shutdown(bool cancel_in_flight) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
  }
  if (cancel_in_flight) cancel_all_.store(true);
  stop_.store(true);
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ember
