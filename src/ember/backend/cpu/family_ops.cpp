// Per-row ops only some families need (GPT-2's LayerNorm, Gemma 2's soft-cap): plain C++ that the
// compiler vectorises; they run once per token per layer, far from the matmuls' cost.
#include <cmath>

#include "ember/backend/cpu/kernels.h"

namespace ember::cpu {

void layernorm(const float* x, const float* weight, const float* bias, float* y, int64_t T,
               int64_t D, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * D;
    float* yt = y + t * D;
    // Two passes (mean, then the centred sum of squares): no cancellation for large means.
    double sum = 0.0;
    for (int64_t i = 0; i < D; ++i) sum += xt[i];
    const auto mean = static_cast<float>(sum / static_cast<double>(D));
    double sq = 0.0;
    for (int64_t i = 0; i < D; ++i) {
      const float c = xt[i] - mean;
      sq += static_cast<double>(c) * c;
    }
    const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(D) + eps));
    for (int64_t i = 0; i < D; ++i) yt[i] = (xt[i] - mean) * inv * weight[i] + bias[i];
  }
}

void softcap(float* x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

}  // namespace ember::cpu
