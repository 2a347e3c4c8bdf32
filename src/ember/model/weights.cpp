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
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) fn(*m);
  }
  fn(w.lm_head);
}

}  // namespace

int64_t ModelWeights::matrix_bytes() const {
  int64_t total = 0;
  for_each_matrix(*this, [&](const WeightMatrix& m) { total += m.n_rows * m.row_bytes; });
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

std::vector<float> rope_inverse_frequencies(const ModelConfig& config) {
  int64_t half = config.rope_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(config.rope_theta),
                           -2.0 * static_cast<double>(i) / static_cast<double>(config.rope_dim));
    if (config.rope_scaling == RopeScaling::Llama3) {
      // Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band in
      // between interpolated smoothly.
      double low_wavelen = config.rope_original_max_position / config.rope_low_freq_factor;
      double high_wavelen = config.rope_original_max_position / config.rope_high_freq_factor;
      double wavelen = 2.0 * std::numbers::pi / freq;
      if (wavelen > low_wavelen) {
        freq /= config.rope_factor;
      } else if (wavelen >= high_wavelen) {
        double smooth =
            (config.rope_original_max_position / wavelen - config.rope_low_freq_factor) /
            (config.rope_high_freq_factor - config.rope_low_freq_factor);
        freq = (1.0 - smooth) * freq / config.rope_factor + smooth * freq;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(freq);
  }
  return inv;
}

}  // namespace ember
