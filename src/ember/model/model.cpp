#include "ember/model/model.h"

#include "ember/core/error.h"
#include "ember/model/family_models.h"

namespace ember {

std::unique_ptr<Model> make_model(const ModelWeights& weights) {
  const std::string family = weights.config.family();
  if (family == "gpt2") return make_gpt2_model(weights);
  if (family == "gemma") return make_gemma_model(weights);
  return make_llama_model(weights);
}

}  // namespace ember
