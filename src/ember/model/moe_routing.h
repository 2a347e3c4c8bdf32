// Mixture-of-experts routing (Mixtral, Qwen2-MoE, OLMoE): each token's router logits -> softmax
// over all experts -> the top k by probability -> weights (renormalized to sum 1 where the family
// does), then grouped by expert, so that the forward pass runs each active expert once per step for
// all the tokens that chose it (its weights read once, whatever the batch) and never touches the
// rest.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ember {

// One step's routing, by expert: rows[e] are the step's token rows routed to expert e (ascending),
// weights[e] their router weights.
struct ExpertRoutes {
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<float>> weights;
};

// logits [T, E] (row-major) -> routes over E experts with k per token. Ties in probability go to
// the lower expert id. `normalize`: the k weights divided by their sum (Mixtral; HF's
// norm_topk_prob), else the softmax probabilities as they are.
void route_tokens(std::span<const float> logits, int64_t T, int64_t E, int64_t k, bool normalize,
                  ExpertRoutes& routes);

}  // namespace ember
