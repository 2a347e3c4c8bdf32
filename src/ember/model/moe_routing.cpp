#include "ember/model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ember {

void route_tokens(std::span<const float> logits, int64_t T, int64_t E, int64_t k, bool normalize,
                  ExpertRoutes& routes) {
  routes.rows.assign(static_cast<size_t>(E), {});
  routes.weights.assign(static_cast<size_t>(E), {});
  std::vector<double> prob(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits.data() + t * E;
    const float max = *std::max_element(z, z + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += prob[static_cast<size_t>(e)] = std::exp(z[e] - max);
    for (double& p : prob) p /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
    });
    double chosen = 0;
    for (int64_t i = 0; i < k; ++i) chosen += prob[static_cast<size_t>(order[i])];
    for (int64_t i = 0; i < k; ++i) {
      const auto e = static_cast<size_t>(order[static_cast<size_t>(i)]);
      routes.rows[e].push_back(static_cast<int32_t>(t));
      routes.weights[e].push_back(static_cast<float>(normalize ? prob[e] / chosen : prob[e]));
    }
  }
}

}  // namespace ember
