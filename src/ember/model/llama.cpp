// The Llama family's forward pass: Llama 1-3, SmolLM2, Mistral (sliding window), Qwen2 (QKV
// biases), Qwen3 (per-head Q/K norms), Phi-3 (fused QKV and gate/up, split at load; LongRoPE),
// stories*.
//   block = RMSNorm -> Q,K,V (+bias) (-> Q/K norm) -> RoPE -> store K,V -> attention -> W_O
//           -> +residual; RMSNorm -> gate, up -> SiLU(gate) * up -> down -> +residual
#include "ember/model/decoder.h"
#include "ember/model/family_models.h"

namespace ember {

namespace {

class LlamaModel : public DecoderModel {
 public:
  explicit LlamaModel(const ModelWeights& weights) : DecoderModel(weights) {}

  std::span<const float> forward(const Batch& batch, KvCache& kv) override {
    const int64_t T = batch.size();
    reserve(T);
    embed(batch);
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      norm(x_.data(), lw.attn_norm, nullptr, xn_.data(), T);
      attention(l, lw, batch, kv);
      add_residual(l, Sublayer::Attention, T);
      norm(x_.data(), lw.ffn_norm, nullptr, xn_.data(), T);
      mlp(l, lw, T);
      add_residual(l, Sublayer::Mlp, T);
    }
    return logits(batch);
  }
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const ModelWeights& weights) {
  return std::make_unique<LlamaModel>(weights);
}

}  // namespace ember
