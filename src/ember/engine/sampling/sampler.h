// Turns one row of logits into a token, as one chain of logits processors: logit bias and banned
// tokens -> penalties (repetition over the recent tokens, OpenAI presence / frequency over the
// generated ones) -> greedy
// (temperature 0) or top-k -> top-p -> min-p -> temperature -> seeded draw. Every sampling
// decision of every command lives here. Same seed + same logits sequence -> same tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ember {

struct SamplingParams {
  float temperature = 0.8f;        // 0 = greedy (argmax)
  int32_t top_k = 40;              // <= 0: disabled
  float top_p = 0.95f;             // >= 1: disabled
  float min_p = 0.05f;             // <= 0: disabled; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;     // 1: disabled; CTRL-style: logit>0 ? logit/r : logit*r
  int32_t repeat_last_n = 64;      // how many recent tokens the penalty looks at
  float presence_penalty = 0.0f;   // OpenAI: subtracted once from every generated token's logit
  float frequency_penalty = 0.0f;  // OpenAI: times the token's count among the generated ones
  uint64_t seed = 0xE3BE2;
  // OpenAI logit_bias: (token, bias) added to the token's logit before anything else; -100 in
  // effect bans a token, +100 in effect forces it.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t vocab_size);
  // `logits`: [vocab_size]; `history`: the sequence's tokens so far (prompt + generated), of which
  // the first n_prompt are the prompt (presence / frequency penalties count only the rest).
  // `banned`: tokens that may not be chosen this step (min_tokens holds back end-of-generation);
  // if every token is banned or -inf, the first candidate is returned.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history,
                 size_t n_prompt = 0, std::span<const int32_t> banned = {});
  // The distribution sample() draws from for these arguments: (probability, token) of every token
  // it could return, summing to 1 (greedy: the argmax with probability 1). Valid until the next
  // call; draws nothing.
  std::span<const std::pair<float, int32_t>> distribution(std::span<const float> logits,
                                                          std::span<const int32_t> history,
                                                          size_t n_prompt = 0,
                                                          std::span<const int32_t> banned = {});
  // Grammar-constrained decoding: tokens with allowed[id] == 0 are excluded from the next
  // sample()/distribution() calls (null: no restriction). The vector must outlive those calls.
  void set_allowed(const std::vector<uint8_t>* allowed) { allowed_ = allowed; }
  // A uniform draw in [0, 1) from this sampler's seeded stream (what sample() consumes per draw).
  double uniform();
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch: (logit or prob, token)
  std::vector<int32_t> scratch_tokens_;
  const std::vector<uint8_t>* allowed_ = nullptr;

  void apply_penalties(std::span<const int32_t> history, size_t n_prompt);
  void apply_bias(std::span<const int32_t> banned);
};

// The token a uniform draw u in [0, 1) picks from a distribution of (probability, token).
int32_t draw_from(std::span<const std::pair<float, int32_t>> distribution, double u);

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> values);

}  // namespace ember
