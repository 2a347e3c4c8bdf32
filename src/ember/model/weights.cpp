#include "ember/model/weights.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>
#include <utility>

namespace ember {

namespace {

template <typename Fn>
void for_each_matrix(const ModelWeights& w, Fn fn) {
  for (const auto& l : w.layers) {
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router,
                          &l.shared_expert_gate}) {
      if (m->data != nullptr) fn(*m);  // GPT-2 has no gate; dense layers no router
    }
    for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
      for (const WeightMatrix& m : *experts) fn(m);
    }
  }
  fn(w.lm_head);
}

int64_t expert_bytes(const LayerWeights& l) {
  int64_t total = 0;
  for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
    for (const WeightMatrix& m : *experts) total += m.bytes();
  }
  return total;
}

}  // namespace

int64_t ModelWeights::matrix_bytes() const {
  int64_t total = 0;
  for_each_matrix(*this, [&](const WeightMatrix& m) { total += m.n_rows * m.row_bytes; });
  return total;
}

int64_t ModelWeights::active_matrix_bytes() const {
  int64_t total = matrix_bytes();
  if (!config.is_moe()) return total;
  for (const LayerWeights& l : layers) {
    // Experts are the same size within a layer: the unused ones are not read.
    total -= expert_bytes(l) * (config.n_experts - config.n_experts_used) / config.n_experts;
  }
  return total;
}

std::string ModelWeights::matrix_dtypes() const {
  int counts[std::size(kAllDTypes)] = {};
  for_each_matrix(*this, [&](const WeightMatrix& m) { ++counts[static_cast<size_t>(m.dtype)]; });
  std::vector<std::pair<int, DType>> present;
  for (DType d : kAllDTypes) {
    if (counts[static_cast<size_t>(d)] > 0) present.emplace_back(counts[static_cast<size_t>(d)], d);
  }
  if (present.size() == 1) return dtype_name(present[0].second);
  std::stable_sort(present.begin(), present.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (const auto& [n, d] : present) {
    out += (out.empty() ? "" : ", ") + std::string(dtype_name(d)) + " x" + std::to_string(n);
  }
  return out;
}

int64_t ModelWeights::copied_matrix_bytes() const {
  int64_t total = 0;
  for_each_matrix(*this, [&](const WeightMatrix& m) {
    if (backend->owns_weight(m.data)) total += m.n_rows * m.row_bytes;
  });
  return total;
}

namespace {

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band in between
// interpolated smoothly.
double llama3_frequency(const ModelConfig& c, double freq) {
  const double low_wavelen = c.rope_original_max_position / c.rope_low_freq_factor;
  const double high_wavelen = c.rope_original_max_position / c.rope_high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / freq;
  if (wavelen > low_wavelen) return freq / c.rope_factor;
  if (wavelen < high_wavelen) return freq;
  const double smooth = (c.rope_original_max_position / wavelen - c.rope_low_freq_factor) /
                        (c.rope_high_freq_factor - c.rope_low_freq_factor);
  return (1.0 - smooth) * freq / c.rope_factor + smooth * freq;
}

// YaRN: dimensions that turn fewer than beta_slow times over the original context are
// interpolated (divided by factor), those turning more than beta_fast times are kept, with a
// linear ramp between (the correction range rounded outwards, as HF computes it).
double yarn_frequency(const ModelConfig& c, int64_t i, double freq) {
  const double dim = static_cast<double>(c.rope_dim), base = c.rope_theta;
  const auto correction_dim = [&](double rotations) {
    return dim *
           std::log(static_cast<double>(c.rope_original_max_position) /
                    (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(base));
  };
  const double low = std::max(0.0, std::floor(correction_dim(c.rope_yarn_beta_fast)));
  double high = std::min(dim - 1.0, std::ceil(correction_dim(c.rope_yarn_beta_slow)));
  if (high == low) high += 0.001;
  const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  const double keep = 1.0 - ramp;  // 1: extrapolate (keep freq), 0: interpolate
  return freq / c.rope_factor * (1.0 - keep) + freq * keep;
}

}  // namespace

double dynamic_ntk_base(const ModelConfig& c) {
  // HF's formula for a sequence of L positions: base * (factor L / original - (factor - 1))^(d /
  // (d - 2)). HF re-evaluates it as the sequence grows, which would leave the keys already in a
  // cache rotated with an older base; ember, as vLLM, fixes L at the scaled context
  // (max_position_embeddings = original x factor), so every position uses one base.
  const double d = static_cast<double>(c.rope_dim);
  const double L = static_cast<double>(c.max_position_embeddings);
  const double original = static_cast<double>(c.rope_original_max_position);
  return c.rope_theta *
         std::pow(c.rope_factor * L / original - (c.rope_factor - 1.0), d / (d - 2.0));
}

std::vector<float> rope_inverse_frequencies(const ModelConfig& c, bool local) {
  const int64_t half = c.rope_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const double theta = local && c.rope_local_theta > 0.0f ? c.rope_local_theta : c.rope_theta;
  // LongRoPE picks the long factors when the model's context is longer than the original one
  // (llama.cpp does the same at full context; HF decides by the current sequence length).
  const std::vector<float>& longrope_factors =
      c.max_position_embeddings > c.rope_original_max_position ? c.rope_long_factors
                                                               : c.rope_short_factors;
  double base = theta;
  if (!local && c.rope_scaling == RopeScaling::Dynamic) base = dynamic_ntk_base(c);
  for (int64_t i = 0; i < half; ++i) {
    double freq = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dim));
    if (!local) {
      switch (c.rope_scaling) {
        case RopeScaling::None:
        case RopeScaling::Dynamic:  // in the base
          break;
        case RopeScaling::Linear:
          freq /= c.rope_factor;
          break;
        case RopeScaling::Llama3:
          freq = llama3_frequency(c, freq);
          break;
        case RopeScaling::Yarn:
          freq = yarn_frequency(c, i, freq);
          break;
        case RopeScaling::LongRope:
          if (static_cast<int64_t>(longrope_factors.size()) == half) {
            freq /= longrope_factors[static_cast<size_t>(i)];
          }
          break;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(freq);
  }
  return inv;
}

}  // namespace ember
