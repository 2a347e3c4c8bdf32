// Gemma 2 and Gemma 3 (text): the Llama block with a norm on each sublayer's output too (four
// norms per block), embeddings scaled by sqrt(d_model), GeGLU, query_pre_attn_scalar, attention
// and final soft-caps (2), sliding-window layers interleaved with global ones, QK norms and a
// local RoPE base on the sliding layers (3). The (1 + w) of Gemma's norms is folded in at load.
//   block = x + norm_post(attn(norm_in(x)));  x + norm_post_ffn(mlp(norm_pre_ffn(x)))
#include "ember/model/decoder.h"
#include "ember/model/family_models.h"

namespace ember {

namespace {

class GemmaModel : public DecoderModel {
 public:
  explicit GemmaModel(const ModelWeights& weights) : DecoderModel(weights) {}

  std::span<const float> forward(const Batch& batch, KvCache& kv) override {
    const int64_t T = batch.size();
    reserve(T);
    embed(batch);
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      norm(x_.data(), lw.attn_norm, nullptr, xn_.data(), T);
      attention(l, lw, batch, kv);
      norm(tmp_.data(), lw.attn_out_norm, nullptr, tmp_.data(), T);
      add_residual(l, Sublayer::Attention, T);
      norm(x_.data(), lw.ffn_norm, nullptr, xn_.data(), T);
      mlp(l, lw, T);
      norm(tmp_.data(), lw.ffn_out_norm, nullptr, tmp_.data(), T);
      add_residual(l, Sublayer::Mlp, T);
    }
    return logits(batch);
  }
};

}  // namespace

std::unique_ptr<Model> make_gemma_model(const ModelWeights& weights) {
  return std::make_unique<GemmaModel>(weights);
}

}  // namespace ember
