// Turns one row of logits into a token: repetition penalty -> greedy (temperature 0) or
// top-k -> top-p -> min-p -> temperature -> seeded draw. Same seed + same logits sequence -> same
// tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ember {

struct SamplingParams {
  float temperature = 0.8f;     // 0 = greedy (argmax)
  int32_t top_k = 40;           // <= 0: disabled
  float top_p = 0.95f;          // >= 1: disabled
  float min_p = 0.05f;          // <= 0: disabled; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: disabled; CTRL-style: logit>0 ? logit/r : logit*r
  int32_t repeat_last_n = 64;   // how many recent tokens the penalty looks at
  uint64_t seed = 0xE3BE2;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t vocab_size);
  // `logits`: [vocab_size]; `history`: the sequence's tokens so far (prompt + generated).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch: (logit or prob, token)
};

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> values);

}  // namespace ember
