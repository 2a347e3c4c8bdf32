#include "ember/engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "ember/engine/sampling/sampler.h"

namespace ember {

std::string SpeculativeOptions::proposer_name() const {
  if (!uses_draft()) return "prompt lookup";
  if (draft_layers <= 0) return draft_label;
  return draft_label + ", first " + std::to_string(draft_layers) + " layers";
}

void SpeculativeStats::count_step(int64_t guesses) {
  const auto k = static_cast<size_t>(std::max<int64_t>(0, guesses));
  if (steps_by_guesses.size() <= k) steps_by_guesses.resize(k + 1, 0);
  ++steps_by_guesses[k];
}

double SpeculativeStats::theoretical_speedup_per_step(double c) const {
  const double a = std::min(acceptance_rate(), 0.999999);
  double tokens = 0, cost = 0;
  for (size_t k = 0; k < steps_by_guesses.size(); ++k) {
    const auto n = static_cast<double>(steps_by_guesses[k]);
    tokens += n * (1.0 - std::pow(a, static_cast<double>(k) + 1.0)) / (1.0 - a);
    cost += n * (static_cast<double>(k) * c + 1.0);
  }
  return cost > 0 ? tokens / cost : 0.0;
}

namespace {

using Weighted = std::pair<float, int32_t>;

double probability_of(std::span<const Weighted> dist, int32_t token) {
  for (const Weighted& w : dist) {
    if (w.second == token) return w.first;
  }
  return 0.0;
}

}  // namespace

SpeculativeVerdict accept_or_resample(std::span<const Weighted> p, std::span<const Weighted> q,
                                      int32_t guess, double u_accept, double u_resample) {
  const double p_guess = probability_of(p, guess);
  const double q_guess = probability_of(q, guess);
  if (q_guess > 0.0 && u_accept * q_guess < p_guess) return {true, guess};
  // The residual max(0, p - q) lives on p's support; q sorted by token makes each lookup a search.
  std::vector<Weighted> q_by_token(q.begin(), q.end());
  std::sort(q_by_token.begin(), q_by_token.end(),
            [](const Weighted& a, const Weighted& b) { return a.second < b.second; });
  const auto q_of = [&](int32_t token) -> double {
    auto it = std::lower_bound(q_by_token.begin(), q_by_token.end(), token,
                               [](const Weighted& w, int32_t t) { return w.second < t; });
    return it != q_by_token.end() && it->second == token ? it->first : 0.0;
  };
  double total = 0.0;
  for (const Weighted& w : p) total += std::max(0.0, static_cast<double>(w.first) - q_of(w.second));
  if (!(total > 0.0)) return {false, draw_from(p, u_resample)};  // p <= q (rounding): p itself
  const double target = u_resample * total;
  double cumulative = 0.0;
  int32_t last = p.back().second;
  for (const Weighted& w : p) {
    const double r = std::max(0.0, static_cast<double>(w.first) - q_of(w.second));
    if (r <= 0.0) continue;
    last = w.second;
    cumulative += r;
    if (target < cumulative) return {false, w.second};
  }
  return {false, last};  // rounding left the total a hair above the sum
}

std::vector<int32_t> propose_lookup(std::span<const int32_t> tokens, int32_t max_ngram,
                                    int64_t max_draft) {
  const auto size = static_cast<int64_t>(tokens.size());
  if (max_draft <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_ngram, size - 1); n >= 1; --n) {
    const auto tail = tokens.subspan(static_cast<size_t>(size - n));
    // Latest occurrence first: a match at p covers [p, p + n), and its continuation starts at
    // p + n, which must lie before the end (the tail itself is no match).
    for (int64_t p = size - n - 1; p >= 0; --p) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + p)) continue;
      // The continuation reads on past the end into the guesses themselves: a loop of period
      // size - n - p (the text repeating itself) is guessed a whole k ahead.
      std::vector<int32_t> draft;
      for (int64_t i = p + n; static_cast<int64_t>(draft.size()) < max_draft; ++i) {
        draft.push_back(i < size ? tokens[static_cast<size_t>(i)]
                                 : draft[static_cast<size_t>(i - size)]);
      }
      return draft;
    }
  }
  return {};
}

}  // namespace ember
