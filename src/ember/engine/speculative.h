// Speculative decoding's proposer and settings. A proposer guesses the next k tokens of a
// sequence; the engine feeds the last sampled token plus the guesses in one forward step (a
// prefill-shaped chunk), samples every row with the sequence's own sampler, and keeps the guesses
// up to the first one the sampler did not choose, plus the token it chose there. As each kept token
// is exactly the token the sampler drew for its row (one draw per emitted token, in order), the
// output is the output without speculation, greedy or seeded: a proposal that is certain (q = 1
// on one token) is accepted with probability p(token), which is drawing from p and comparing, and
// on rejection the draw is p without the token, renormalized: the standard rule for that q.
// The KV of rejected guesses is cut off (block table truncated) after the step.
//
// Proposers: prompt lookup (--lookup N): the continuation of the latest earlier occurrence of the
// sequence's last n tokens (n = N down to 1) in its prompt and generated text. No model, no memory;
// strong where the output repeats its input (editing, summarizing, code, quoting). A draft model
// (--draft, --draft-dtype, --draft-layers; engine/draft_proposer.h): a cheaper model's greedy
// continuation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ember {

struct ModelWeights;

struct SpeculativeOptions {
  int32_t lookup_ngram = 0;  // --lookup N: longest n-gram the proposer matches (0: off)
  int32_t draft_max = 5;     // --draft-max K: guesses per step
  // The draft model's weights (--draft MODEL, --draft-dtype; must outlive the engine); null: none.
  const ModelWeights* draft = nullptr;
  // --draft-layers N: the draft (or, without one, the model itself) cut to its first N layers plus
  // the final norm and head: an early exit reading the same weights. 0: every layer.
  int64_t draft_layers = 0;
  std::string draft_label = "draft model";  // how stats name the draft ("q4_0 copy", a file name)
  bool uses_draft() const { return draft != nullptr || draft_layers > 0; }
  bool enabled() const { return (lookup_ngram > 0 || uses_draft()) && draft_max > 0; }
  // "prompt lookup", or the draft's label (with its layers for an early exit).
  std::string proposer_name() const;
};

struct SpeculativeStats {
  int64_t verify_steps = 0;  // sequence-steps that verified at least one guess
  int64_t drafted = 0;       // guesses fed
  int64_t accepted = 0;      // guesses kept
  double propose_seconds = 0;
  double verify_seconds = 0;  // forward time of the steps that carried guesses
  // Decode sequence-steps of speculating sequences by the guesses they carried: [k] = the steps
  // with k guesses; [0] = the steps with none (no match for prompt lookup, backing off after a
  // step whose guesses all failed, or no room left under max_tokens and the context).
  std::vector<int64_t> steps_by_guesses;
  void count_step(int64_t guesses);
  int64_t steps_without_guesses() const {
    return steps_by_guesses.empty() ? 0 : steps_by_guesses[0];
  }
  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
  // The theoretical speedup (1 - a^(k+1)) / ((1 - a)(kc + 1)) (a: acceptance_rate(), c: the
  // proposer's cost per guess over a plain step's) taken over the decode steps as they were:
  // sum over steps of the tokens expected from their k guesses, (1 - a^(k+1)) / (1 - a), over the
  // sum of their costs, k c + 1. With the same k at every step this is the formula itself; a step
  // without guesses counts as the formula's k = 0 (one token for one plain step's cost).
  double theoretical_speedup_per_step(double c) const;
  // Tokens each verifying sequence-step emitted: the kept guesses plus the sampled one.
  double mean_accepted_length() const {
    return verify_steps > 0
               ? 1.0 + static_cast<double>(accepted) / static_cast<double>(verify_steps)
               : 0.0;
  }
};

// One verified position of speculative sampling with a draft that sampled its guess from q: p is
// the model's distribution there, both as (probability, token) over their supports. The guess is
// accepted when u_accept < p(guess) / q(guess); otherwise the token is drawn (with u_resample)
// from max(0, p - q), normalized. Either way the token is distributed exactly as p.
struct SpeculativeVerdict {
  bool accepted = false;
  int32_t token = 0;
};
SpeculativeVerdict accept_or_resample(std::span<const std::pair<float, int32_t>> p,
                                      std::span<const std::pair<float, int32_t>> q, int32_t guess,
                                      double u_accept, double u_resample);

// max_draft tokens following the latest earlier occurrence of tokens' last n tokens, for the
// largest n in [1, max_ngram] that occurs (read on periodically past the end: the match says the
// text repeats with that period); empty when none does.
std::vector<int32_t> propose_lookup(std::span<const int32_t> tokens, int32_t max_ngram,
                                    int64_t max_draft);

}  // namespace ember
