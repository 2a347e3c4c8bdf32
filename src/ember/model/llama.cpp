#include "ember/model/llama.h"

#include <cmath>

namespace ember {

LlamaModel::LlamaModel(const ModelWeights& weights)
    : weights_(weights), backend_(*weights.backend) {}

std::span<const float> LlamaModel::forward(const Batch& batch, KvStorage& kv) {
  const ModelConfig& c = weights_.config;
  const int64_t T = batch.size(), D = c.d_model;
  backend_.reserve(x_, T * D);
  backend_.reserve(xn_, T * D);
  backend_.reserve(tmp_, T * D);
  backend_.reserve(q_, T * c.q_dim());
  backend_.reserve(attn_, T * c.q_dim());
  backend_.reserve(k_, T * c.kv_dim());
  backend_.reserve(v_, T * c.kv_dim());
  backend_.reserve(gate_, T * c.d_ffn);
  backend_.reserve(up_, T * c.d_ffn);

  // W_E gather: x[t] = embed[token[t]].
  backend_.embed(weights_.embed, batch, x_.data());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    attention_block(l, lw, batch, kv);
    mlp_block(lw, T);
  }

  // Final norm and lm_head only for the rows whose logits are wanted.
  const auto R = static_cast<int64_t>(batch.logit_rows.size());
  if (R == 0) return {};
  backend_.reserve(final_, R * D);
  backend_.reserve(logits_, R * c.vocab_size);
  backend_.gather_rows(x_.data(), D, batch.logit_rows, final_.data());
  backend_.rmsnorm(final_.data(), weights_.final_norm, final_.data(), R, D, c.rms_norm_eps);
  backend_.matmul(final_.data(), R, {&weights_.lm_head}, {logits_.data()});
  return backend_.to_host(logits_.data(), R * c.vocab_size, host_logits_);
}

void LlamaModel::attention_block(int64_t layer, const LayerWeights& lw, const Batch& batch,
                                 KvStorage& kv) {
  const ModelConfig& c = weights_.config;
  const int64_t T = batch.size(), D = c.d_model;
  backend_.rmsnorm(x_.data(), lw.attn_norm, xn_.data(), T, D, c.rms_norm_eps);
  backend_.matmul(xn_.data(), T, {&lw.wq, &lw.wk, &lw.wv}, {q_.data(), k_.data(), v_.data()});
  if (lw.bq != nullptr) {  // Qwen2's attention biases
    backend_.add_bias(q_.data(), lw.bq, T, c.q_dim());
    backend_.add_bias(k_.data(), lw.bk, T, c.kv_dim());
    backend_.add_bias(v_.data(), lw.bv, T, c.kv_dim());
  }
  backend_.rope_store_kv(kv, layer, q_.data(), k_.data(), v_.data(), c.n_heads, c.rope_dim,
                         weights_.rope_inv_freq, batch);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  backend_.attention(kv, layer, q_.data(), c.n_heads, scale, batch, attn_.data());
  backend_.matmul(attn_.data(), T, {&lw.wo}, {tmp_.data()});
  backend_.add(x_.data(), tmp_.data(), T, D);
}

void LlamaModel::mlp_block(const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = weights_.config;
  const int64_t D = c.d_model, F = c.d_ffn;
  backend_.rmsnorm(x_.data(), lw.ffn_norm, xn_.data(), T, D, c.rms_norm_eps);
  backend_.matmul(xn_.data(), T, {&lw.w_gate, &lw.w_up}, {gate_.data(), up_.data()});
  backend_.silu_mul(gate_.data(), up_.data(), gate_.data(), T, F);
  backend_.matmul(gate_.data(), T, {&lw.w_down}, {tmp_.data()});
  backend_.add(x_.data(), tmp_.data(), T, D);
}

}  // namespace ember
