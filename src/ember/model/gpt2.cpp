// GPT-2: LayerNorm with bias, learned absolute positions (no RoPE), biases on every linear, an
// ungated GELU (tanh) MLP, fused c_attn split into Q/K/V and Conv1D weights transposed at load.
//   block = x + W_O attn(LN_1(x)) + b_O;  x + W_down gelu(W_up LN_2(x) + b_up) + b_down
#include "ember/model/decoder.h"
#include "ember/model/family_models.h"

namespace ember {

namespace {

class Gpt2Model : public DecoderModel {
 public:
  explicit Gpt2Model(const ModelWeights& weights) : DecoderModel(weights) {}

  std::span<const float> forward(const Batch& batch, KvCache& kv) override {
    const int64_t T = batch.size();
    reserve(T);
    embed(batch);  // token + position embeddings
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      norm(x_.data(), lw.attn_norm, lw.attn_norm_bias, xn_.data(), T);
      attention(l, lw, batch, kv);
      add_residual(l, Sublayer::Attention, T);
      norm(x_.data(), lw.ffn_norm, lw.ffn_norm_bias, xn_.data(), T);
      mlp(l, lw, T);
      add_residual(l, Sublayer::Mlp, T);
    }
    return logits(batch);
  }
};

}  // namespace

std::unique_ptr<Model> make_gpt2_model(const ModelWeights& weights) {
  return std::make_unique<Gpt2Model>(weights);
}

}  // namespace ember
