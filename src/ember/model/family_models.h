// The family files' factories (llama.cpp, gemma.cpp, gpt2.cpp); make_model() picks one.
#pragma once

#include <memory>

#include "ember/model/model.h"

namespace ember {

std::unique_ptr<Model> make_llama_model(const ModelWeights& weights);
std::unique_ptr<Model> make_gemma_model(const ModelWeights& weights);
std::unique_ptr<Model> make_gpt2_model(const ModelWeights& weights);

}  // namespace ember
