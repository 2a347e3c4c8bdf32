#include "ember/engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ember/core/error.h"

namespace ember {

namespace {

using Candidate = std::pair<float, int32_t>;

// Descending by value; equal values keep the lower token id first so every step is deterministic.
bool higher(const Candidate& a, const Candidate& b) {
  if (a.first != b.first) return a.first > b.first;
  return a.second < b.second;
}

// Uniform double in [0, 1) from the top 53 bits of one engine output. Written out rather than
// using std::uniform_real_distribution, whose algorithm differs between standard libraries, so a
// seed gives the same tokens everywhere.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Replaces each candidate's value (a logit) with its probability under softmax(logit / T);
// `max_logit` (finite, the largest among them) keeps exp() in range.
void softmax_in_place(std::span<Candidate> c, float max_logit, float temperature) {
  double sum = 0.0;
  for (Candidate& x : c) {
    x.first = std::exp((x.first - max_logit) / temperature);
    sum += x.first;
  }
  for (Candidate& x : c) x.first = static_cast<float>(x.first / sum);
}

}  // namespace

int32_t argmax(std::span<const float> values) {
  if (values.empty()) throw Error("argmax of an empty span");
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;  // strict: ties keep the lower index
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {
  if (vocab_size <= 0) throw Error("sampler: vocab_size must be positive");
  candidates_.reserve(static_cast<size_t>(vocab_size));
}

void Sampler::apply_bias(std::span<const int32_t> banned) {
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && token < vocab_size_) candidates_[static_cast<size_t>(token)].first += bias;
  }
  for (int32_t token : banned) {
    if (token >= 0 && token < vocab_size_) {
      candidates_[static_cast<size_t>(token)].first = -std::numeric_limits<float>::infinity();
    }
  }
  if (allowed_ != nullptr) {
    for (size_t i = 0; i < candidates_.size() && i < allowed_->size(); ++i) {
      if (!(*allowed_)[i]) candidates_[i].first = -std::numeric_limits<float>::infinity();
    }
  }
}

void Sampler::apply_penalties(std::span<const int32_t> history, size_t n_prompt) {
  // Repetition penalty (CTRL): each distinct token among the last repeat_last_n is penalised
  // once, however often it occurred. Dividing a positive logit / multiplying a negative one both
  // move it down, which a plain division would not do for negative logits.
  if (params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0 && !history.empty()) {
    const size_t n = std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
    scratch_tokens_.assign(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    std::sort(scratch_tokens_.begin(), scratch_tokens_.end());
    scratch_tokens_.erase(std::unique(scratch_tokens_.begin(), scratch_tokens_.end()),
                          scratch_tokens_.end());
    for (int32_t t : scratch_tokens_) {
      if (t < 0 || t >= vocab_size_) continue;
      float& l = candidates_[t].first;
      l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }
  // OpenAI semantics over the generated tokens: z -= presence * [count > 0] + frequency * count.
  if ((params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) &&
      history.size() > n_prompt) {
    scratch_tokens_.assign(history.begin() + static_cast<std::ptrdiff_t>(n_prompt), history.end());
    std::sort(scratch_tokens_.begin(), scratch_tokens_.end());
    for (size_t i = 0; i < scratch_tokens_.size();) {
      size_t j = i;
      while (j < scratch_tokens_.size() && scratch_tokens_[j] == scratch_tokens_[i]) ++j;
      const int32_t t = scratch_tokens_[i];
      if (t >= 0 && t < vocab_size_) {
        candidates_[static_cast<size_t>(t)].first -=
            params_.presence_penalty + params_.frequency_penalty * static_cast<float>(j - i);
      }
      i = j;
    }
  }
}

double Sampler::uniform() {
  return uniform01(rng_);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                        size_t n_prompt, std::span<const int32_t> banned) {
  if (params_.temperature <= 0.0f) return distribution(logits, history, n_prompt, banned)[0].second;
  const std::span<const Candidate> cand = distribution(logits, history, n_prompt, banned);
  return draw_from(cand, uniform01(rng_));
}

int32_t draw_from(std::span<const Candidate> distribution, double u) {
  double cumulative = 0.0;
  for (const Candidate& c : distribution) {
    cumulative += c.first;
    if (u < cumulative) return c.second;
  }
  return distribution.back().second;  // rounding left the total a hair below 1
}

std::span<const Candidate> Sampler::distribution(std::span<const float> logits,
                                                 std::span<const int32_t> history, size_t n_prompt,
                                                 std::span<const int32_t> banned) {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    throw Error("sampler: got " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                std::to_string(vocab_size_));
  }
  const bool penalties = (params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0) ||
                         params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  const bool biased = !params_.logit_bias.empty() || !banned.empty() || allowed_ != nullptr;
  // Greedy without penalties or bias reads the logits as they are (no copy of the vocabulary).
  if (params_.temperature <= 0.0f && !penalties && !biased) {
    candidates_.assign(1, {1.0f, argmax(logits)});
    return candidates_;
  }
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  }

  apply_bias(banned);
  apply_penalties(history, n_prompt);

  if (params_.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < candidates_.size(); ++i) {
      if (candidates_[i].first > candidates_[best].first) best = i;
    }
    candidates_.assign(1, {1.0f, candidates_[best].second});
    return candidates_;
  }

  // Top-k: select the k best without sorting the whole vocabulary, then sort just those (top-p
  // needs them in order). Without top-k the full sort is unavoidable when top-p is on.
  size_t n = candidates_.size();
  const bool use_top_p = params_.top_p < 1.0f;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
                      candidates_.end(), higher);
    candidates_.resize(n);
  } else if (use_top_p) {
    std::sort(candidates_.begin(), candidates_.end(), higher);
  }
  std::span<Candidate> cand(candidates_.data(), n);

  // The filters judge the untempered distribution (as llama.cpp's default chain does);
  // temperature only reshapes the final draw among the survivors. They read probabilities off
  // the logits (p_i / p_max = exp(l_i - l_max)), so the logits stay in place for that draw.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const Candidate& c : cand) max_logit = std::max(max_logit, c.first);
  if (!(max_logit > -std::numeric_limits<float>::infinity())) {
    // Every logit is -inf (or NaN): nothing to weigh, the first candidate.
    candidates_.assign(1, {1.0f, cand[0].second});
    return candidates_;
  }

  if (use_top_p) {
    // Smallest prefix of the sorted candidates whose mass reaches top_p; always at least one.
    double total = 0.0;
    for (const Candidate& c : cand) total += std::exp(static_cast<double>(c.first - max_logit));
    const double target = static_cast<double>(params_.top_p) * total;
    double cumulative = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cumulative += std::exp(static_cast<double>(cand[i].first - max_logit));
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    cand = cand.first(n);
  }

  if (params_.min_p > 0.0f) {
    // p >= min_p * p_max  <=>  logit >= l_max + log(min_p). Capping min_p at 1 keeps the most
    // likely token whatever the setting.
    const float threshold = max_logit + std::log(std::min(params_.min_p, 1.0f));
    size_t w = 0;
    for (size_t i = 0; i < n; ++i) {
      if (cand[i].first >= threshold) cand[w++] = cand[i];
    }
    n = w;
    cand = cand.first(n);
  }

  // Temperature: softmax(logit / T) over the survivors, the distribution of the draw.
  softmax_in_place(cand, max_logit, params_.temperature);
  return cand;
}

}  // namespace ember
