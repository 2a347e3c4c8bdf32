#include "ember/model/model.h"

#include "ember/core/error.h"
#include "ember/model/family_models.h"

namespace ember {

std::unique_ptr<Model> make_model(const ModelWeights& weights) {
  const std::string& a = weights.config.architecture;
  if (a == "gpt2") return make_gpt2_model(weights);
  if (a == "gemma2" || a == "gemma3") return make_gemma_model(weights);
  if (a == "llama" || a == "mistral" || a == "qwen2" || a == "qwen3" || a == "phi3") {
    return make_llama_model(weights);
  }
  throw Error("unsupported architecture '" + a + "' (ember runs " + supported_architectures() +
              ")");
}

}  // namespace ember
