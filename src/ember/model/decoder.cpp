#include "ember/model/decoder.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/core/error.h"

namespace ember {

DecoderModel::DecoderModel(const ModelWeights& weights)
    : weights_(weights), config_(weights.config), backend_(*weights.backend) {}

void DecoderModel::reserve(int64_t T) {
  const ModelConfig& c = config_;
  backend_.reserve(x_, T * c.d_model);
  backend_.reserve(xn_, T * c.d_model);
  backend_.reserve(tmp_, T * c.d_model);
  backend_.reserve(q_, T * c.q_dim());
  backend_.reserve(attn_, T * c.q_dim());
  backend_.reserve(k_, T * c.kv_dim());
  backend_.reserve(v_, T * c.kv_dim());
  const int64_t ffn = std::max({c.d_ffn, c.d_expert_ffn, c.d_shared_expert_ffn});
  backend_.reserve(gate_, T * ffn);
  backend_.reserve(up_, T * ffn);
  if (c.is_moe()) {
    // An expert's tokens (at most T), or every active expert's (T * k) up to kGroupedExpertRows.
    const int64_t expert_rows = std::max(T, std::min(T * c.n_experts_used, kGroupedExpertRows));
    backend_.reserve(router_, T * c.n_experts);
    backend_.reserve(shared_gate_, T);
    backend_.reserve(expert_x_, expert_rows * c.d_model);
    backend_.reserve(expert_out_, expert_rows * c.d_model);
    backend_.reserve(gate_, expert_rows * c.d_expert_ffn);
    backend_.reserve(up_, expert_rows * c.d_expert_ffn);
  }
}

void DecoderModel::embed(const Batch& batch) {
  const int64_t T = batch.size();
  if (observer_ != nullptr) observer_->begin_step(batch);
  if (weights_.receive_hidden) {  // a later pipeline stage: the previous stage's output
    // Received in host memory (MPI), then into the backend's (a copy on host backends too: a
    // step's hidden states are small next to its work).
    host_received_.resize(static_cast<size_t>(T * config_.d_model));
    weights_.receive_hidden(host_received_.data(), T * config_.d_model);
    backend_.from_host(x_.data(), host_received_.data(), T * config_.d_model);
    return;
  }
  backend_.embed(weights_.embed, batch, x_.data());
  if (config_.embed_scale != 1.0f)
    backend_.scale(x_.data(), config_.embed_scale, T, config_.d_model);
  if (config_.learned_positions)
    backend_.add_position_embeddings(weights_.positions, batch, x_.data());
  if (observer_ != nullptr) observe_embedding(batch);
}

void DecoderModel::norm(const float* x, const float* weight, const float* bias, float* y,
                        int64_t rows) {
  const bool layer_norm = config_.norm == NormKind::Layer;
  timed(
      [&] {
        if (layer_norm) {
          backend_.layernorm(x, weight, bias, y, rows, config_.d_model, config_.rms_norm_eps);
        } else {
          backend_.rmsnorm(x, weight, y, rows, config_.d_model, config_.rms_norm_eps);
        }
      },
      [&] {
        // Read x and the weights, write y; a square and an add per value for the statistics, a
        // multiply (and an add) per value to apply them.
        const auto n = static_cast<double>(rows * config_.d_model);
        return OpRecord{OpGroup::Norm, layer_norm ? "layernorm" : "rmsnorm", 0, 4 * n,
                        (2 * n + 2.0 * static_cast<double>(config_.d_model)) * 4};
      });
}

void DecoderModel::attention(int64_t layer, const LayerWeights& lw, const Batch& batch,
                             KvCache& cache) {
  const ModelConfig& c = config_;
  KvStorage& kv = cache.storage(layer);
  const int64_t kv_layer = cache.storage_layer(layer);  // its index among kv's layers
  const int64_t T = batch.size();
  if (weights_.progress_transfers) weights_.progress_transfers();  // --pp: earlier steps' logits
  matmul("wq+wk+wv", xn_.data(), T, {&lw.wq, &lw.wk, &lw.wv}, {q_.data(), k_.data(), v_.data()});
  if (lw.bq != nullptr) {
    backend_.add_bias(q_.data(), lw.bq, T, c.q_dim());
    backend_.add_bias(k_.data(), lw.bk, T, c.kv_dim());
    backend_.add_bias(v_.data(), lw.bv, T, c.kv_dim());
  }
  if (lw.q_norm != nullptr && c.qk_norm_whole && c.tp_ranks > 1) {
    whole_qk_norm_across_ranks(lw, T);
  } else if (lw.q_norm != nullptr && c.qk_norm_whole) {
    // OLMoE: one RMSNorm over each token's whole Q (K) projection.
    backend_.rmsnorm(q_.data(), lw.q_norm, q_.data(), T, c.q_dim(), c.rms_norm_eps);
    backend_.rmsnorm(k_.data(), lw.k_norm, k_.data(), T, c.kv_dim(), c.rms_norm_eps);
  } else if (lw.q_norm != nullptr) {
    // Per-head RMSNorm: the heads of every token are rows of head_dim values.
    backend_.rmsnorm(q_.data(), lw.q_norm, q_.data(), T * c.n_heads, c.head_dim, c.rms_norm_eps);
    backend_.rmsnorm(k_.data(), lw.k_norm, k_.data(), T * c.n_kv_heads, c.head_dim, c.rms_norm_eps);
  }
  timed(
      [&] {
        if (c.learned_positions) {
          backend_.store_kv(kv, kv_layer, k_.data(), v_.data(), batch);
        } else {
          backend_.rope_store_kv(kv, kv_layer, q_.data(), k_.data(), v_.data(), c.n_heads,
                                 c.rope_dim, lw.rope_inv_freq, batch);
        }
      },
      [&] {
        // Q and K rotated, K and V written into the cache: each read and written once.
        const auto values = static_cast<double>(T * (c.q_dim() + 2 * c.kv_dim()));
        return OpRecord{OpGroup::Elementwise, "rope+kv store", 0, 0, values * 4 * 2};
      });
  const AttentionScores scores(c.attention_scale(), c.attn_softcap, lw.window);
  if (observer_ != nullptr) observe_attention_inputs(layer, T, scores);
  timed(
      [&] { backend_.attention(kv, kv_layer, q_.data(), c.n_heads, scores, batch, attn_.data()); },
      [&] { return attention_record(batch, kv, scores); });
  if (observer_ != nullptr) {
    observer_->attention_output(layer, backend_.to_host(attn_.data(), T * c.q_dim(), observed_[0]));
  }
  matmul("wo", attn_.data(), T, {&lw.wo}, {tmp_.data()});
  reduce_partial_sums(T);
  if (lw.bo != nullptr) backend_.add_bias(tmp_.data(), lw.bo, T, c.d_model);
}

void DecoderModel::whole_qk_norm_across_ranks(const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t qd = c.q_dim(), kd = c.kv_dim();
  const std::span<const float> q = backend_.to_host(q_.data(), T * qd, host_qk_[0]);
  const std::span<const float> k = backend_.to_host(k_.data(), T * kd, host_qk_[1]);
  // Per token: the sum of squares of this rank's Q part [0, T) and K part [T, 2T).
  qk_sums_.assign(static_cast<size_t>(2 * T), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    double sq = 0.0, sk = 0.0;
    for (int64_t i = 0; i < qd; ++i) sq += double(q[t * qd + i]) * q[t * qd + i];
    for (int64_t i = 0; i < kd; ++i) sk += double(k[t * kd + i]) * k[t * kd + i];
    qk_sums_[static_cast<size_t>(t)] = static_cast<float>(sq);
    qk_sums_[static_cast<size_t>(T + t)] = static_cast<float>(sk);
  }
  weights_.reduce_host_sums(qk_sums_.data(), 2 * T);
  // Each KV head is held by kv_head_copies ranks: the K sums counted it that many times.
  const auto q_all = static_cast<double>(qd * c.tp_ranks);
  const auto k_all = static_cast<double>(kd * c.tp_ranks / c.kv_head_copies);
  const auto norm = [&](std::span<const float> x, int64_t n, double all, double copies,
                        const float* weight, size_t sum0, std::vector<float>& out) {
    out.resize(static_cast<size_t>(T * n));
    for (int64_t t = 0; t < T; ++t) {
      const double mean = qk_sums_[sum0 + static_cast<size_t>(t)] / copies / all;
      const auto inv = static_cast<float>(1.0 / std::sqrt(mean + c.rms_norm_eps));
      for (int64_t i = 0; i < n; ++i) out[t * n + i] = x[t * n + i] * inv * weight[i];
    }
  };
  norm(q, qd, q_all, 1.0, backend_.to_host(lw.q_norm, qd, host_norm_[0]).data(), 0, normed_qk_);
  backend_.from_host(q_.data(), normed_qk_.data(), T * qd);
  norm(k, kd, k_all, static_cast<double>(c.kv_head_copies),
       backend_.to_host(lw.k_norm, kd, host_norm_[1]).data(), static_cast<size_t>(T), normed_qk_);
  backend_.from_host(k_.data(), normed_qk_.data(), T * kd);
}

void DecoderModel::moe_mlp(int64_t layer, const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t D = c.d_model, E = c.n_experts;
  matmul("router", xn_.data(), T, {&lw.router}, {router_.data()});
  route_tokens(backend_.to_host(router_.data(), T * E, host_router_), T, E, c.n_experts_used,
               c.expert_weights_normalized, routes_);
  backend_.zero(tmp_.data(), T, D);
  expert_load_.resize(static_cast<size_t>(c.n_layers * E));
  for (int64_t e = 0; e < E; ++e) {
    expert_load_[static_cast<size_t>(layer * E + e)] +=
        static_cast<int64_t>(routes_.rows[static_cast<size_t>(e)].size());
  }
  if (T * c.n_experts_used <= kGroupedExpertRows) {
    routed_experts_together(lw, T);
  } else {
    routed_experts_one_by_one(lw);
  }
  if (lw.shared_expert_gate.data == nullptr) return;
  // Qwen2-MoE's shared expert, on every token, scaled by sigmoid(xn . shared_expert_gate).
  const int64_t S = c.d_shared_expert_ffn;
  matmul("shared expert", xn_.data(), T, {&lw.w_gate, &lw.w_up, &lw.shared_expert_gate},
         {gate_.data(), up_.data(), shared_gate_.data()});
  silu_mul(gate_.data(), up_.data(), T, S);
  matmul("shared expert", gate_.data(), T, {&lw.w_down}, {expert_out_.data()});
  const std::span<const float> g = backend_.to_host(shared_gate_.data(), T, host_shared_gate_);
  std::vector<float> scales(static_cast<size_t>(T));
  std::vector<int32_t> all_rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    scales[static_cast<size_t>(t)] = 1.0f / (1.0f + std::exp(-g[static_cast<size_t>(t)]));
    all_rows[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  }
  backend_.scatter_add_rows(expert_out_.data(), D, all_rows, scales, tmp_.data());
}

// Prefill: each expert on its tokens (gathered into one block), its output added into their rows.
void DecoderModel::routed_experts_one_by_one(const LayerWeights& lw) {
  const int64_t D = config_.d_model, F = config_.d_expert_ffn;
  for (size_t e = 0; e < routes_.rows.size(); ++e) {
    const std::vector<int32_t>& rows = routes_.rows[e];
    if (rows.empty()) continue;  // never read: a token costs only its experts' bytes
    const auto n = static_cast<int64_t>(rows.size());
    backend_.gather_rows(xn_.data(), D, rows, expert_x_.data());
    matmul("experts", expert_x_.data(), n, {&lw.expert_gate[e], &lw.expert_up[e]},
           {gate_.data(), up_.data()});
    silu_mul(gate_.data(), up_.data(), n, F);
    matmul("experts", gate_.data(), n, {&lw.expert_down[e]}, {expert_out_.data()});
    backend_.scatter_add_rows(expert_out_.data(), D, rows, routes_.weights[e], tmp_.data());
  }
}

// Decode (T * k rows at most kGroupedExpertRows): every active expert's gate/up in one
// matmul_groups call, one silu_mul over all their rows, every down projection in a second call.
// Expert e's rows sit at its offset in expert_x_, gate_/up_ and expert_out_ (in expert order, as
// routed_experts_one_by_one adds them, so the same sums in the same order).
void DecoderModel::routed_experts_together(const LayerWeights& lw, int64_t T) {
  const int64_t D = config_.d_model, F = config_.d_expert_ffn;
  gate_up_groups_.clear();
  down_groups_.clear();
  int64_t at = 0;
  for (size_t e = 0; e < routes_.rows.size(); ++e) {
    const std::vector<int32_t>& rows = routes_.rows[e];
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    // One token: every expert reads it as it is (the groups share one input, prepared once).
    const float* x = xn_.data();
    if (T > 1) {
      backend_.gather_rows(xn_.data(), D, rows, expert_x_.data() + at * D);
      x = expert_x_.data() + at * D;
    }
    gate_up_groups_.push_back(MatmulGroup{x,
                                          n,
                                          2,
                                          {&lw.expert_gate[e], &lw.expert_up[e]},
                                          {gate_.data() + at * F, up_.data() + at * F}});
    down_groups_.push_back(MatmulGroup{
        gate_.data() + at * F, n, 1, {&lw.expert_down[e]}, {expert_out_.data() + at * D}});
    at += n;
  }
  matmul_groups("experts", gate_up_groups_);
  silu_mul(gate_.data(), up_.data(), at, F);
  matmul_groups("experts", down_groups_);
  at = 0;
  for (size_t e = 0; e < routes_.rows.size(); ++e) {
    const std::vector<int32_t>& rows = routes_.rows[e];
    if (rows.empty()) continue;
    backend_.scatter_add_rows(expert_out_.data() + at * D, D, rows, routes_.weights[e],
                              tmp_.data());
    at += static_cast<int64_t>(rows.size());
  }
}

void DecoderModel::mlp(int64_t layer, const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = config_;
  if (c.is_moe()) {
    moe_mlp(layer, lw, T);
    reduce_partial_sums(T);  // --tp: each rank ran its rows of every expert
    return;
  }
  const int64_t F = c.d_ffn;
  const auto n = static_cast<double>(T * F);
  if (c.mlp == MlpKind::Gelu) {
    matmul("w_up", xn_.data(), T, {&lw.w_up}, {up_.data()});
    if (lw.b_up != nullptr) backend_.add_bias(up_.data(), lw.b_up, T, F);
    timed([&] { backend_.gelu_mul(up_.data(), nullptr, gate_.data(), T, F); },
          [&] {
            return OpRecord{OpGroup::Elementwise, "gelu", 0, 0, 2 * n * 4};
          });
  } else {
    matmul("w_gate+w_up", xn_.data(), T, {&lw.w_gate, &lw.w_up}, {gate_.data(), up_.data()});
    if (lw.b_up != nullptr) backend_.add_bias(up_.data(), lw.b_up, T, F);
    if (c.mlp == MlpKind::GeGlu) {
      timed([&] { backend_.gelu_mul(gate_.data(), up_.data(), gate_.data(), T, F); },
            [&] {
              return OpRecord{OpGroup::Elementwise, "gelu_mul", 0, 0, 3 * n * 4};
            });
    } else {
      silu_mul(gate_.data(), up_.data(), T, F);
    }
  }
  matmul("w_down", gate_.data(), T, {&lw.w_down}, {tmp_.data()});
  reduce_partial_sums(T);
  if (lw.b_down != nullptr) backend_.add_bias(tmp_.data(), lw.b_down, T, c.d_model);
}

std::span<const float> DecoderModel::logits(const Batch& batch) {
  const ModelConfig& c = config_;
  if (weights_.send_hidden) {  // an earlier pipeline stage: the last one computes the logits
    const int64_t n = batch.size() * c.d_model;
    weights_.send_hidden(backend_.to_host(x_.data(), n, host_received_).data(), n);
    hidden_states_ = {};
    return {};  // ModelRunner shares the last stage's logits once the step is through
  }
  const auto H = static_cast<int64_t>(batch.hidden_rows.size());
  hidden_states_ = {};
  if (H > 0) {
    backend_.reserve(hidden_, H * c.d_model);
    backend_.gather_rows(x_.data(), c.d_model, batch.hidden_rows, hidden_.data());
    norm(hidden_.data(), weights_.final_norm, weights_.final_norm_bias, hidden_.data(), H);
    hidden_states_ = backend_.to_host(hidden_.data(), H * c.d_model, host_hidden_);
  }
  const auto R = static_cast<int64_t>(batch.logit_rows.size());
  if (R == 0) {
    if (observer_ != nullptr) observer_->end_step({});
    return {};
  }
  const int64_t V = weights_.lm_head.n_rows;  // vocab_size, or a rank's part of it
  backend_.reserve(final_, R * c.d_model);
  backend_.reserve(logits_, R * V);
  backend_.gather_rows(x_.data(), c.d_model, batch.logit_rows, final_.data());
  norm(final_.data(), weights_.final_norm, weights_.final_norm_bias, final_.data(), R);
  matmul("lm_head", final_.data(), R, {&weights_.lm_head}, {logits_.data()});
  if (c.final_softcap > 0.0f) backend_.softcap(logits_.data(), c.final_softcap, R, V);
  std::span<const float> logits = backend_.to_host(logits_.data(), R * V, host_logits_);
  if (weights_.gather_logits) {  // tensor parallelism: every rank's part of the vocabulary
    gathered_logits_.resize(static_cast<size_t>(R * c.vocab_size));
    weights_.gather_logits(logits.data(), R, gathered_logits_.data());
    logits = gathered_logits_;
  }
  if (observer_ != nullptr) observer_->end_step(logits);
  return logits;
}

}  // namespace ember
