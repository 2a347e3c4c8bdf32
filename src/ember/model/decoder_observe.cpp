// DecoderModel's side of forward_observer.h: the ops it times (matmuls with their FLOPs and bytes,
// the residual adds, silu_mul) and the views it gives an observer (the embedding, the attention
// sublayer's inputs, the residual after each sublayer, the logit lens). Without an observer each
// costs one pointer test.
#include <algorithm>

#include "ember/backend/kv_row_format.h"
#include "ember/model/decoder.h"

namespace ember {

const char* op_group_name(OpGroup group) {
  switch (group) {
    case OpGroup::Matmul:
      return "matmul";
    case OpGroup::Attention:
      return "attention";
    case OpGroup::Norm:
      return "norm";
    case OpGroup::Elementwise:
      return "elementwise";
    case OpGroup::Sampling:
      return "sampling";
  }
  return "?";
}

void DecoderModel::observed_matmul(const char* name, const float* x, int64_t T,
                                   std::initializer_list<const WeightMatrix*> ws,
                                   std::initializer_list<float*> ys) {
  OpRecord record{OpGroup::Matmul, name};
  const WeightMatrix* first = *ws.begin();
  record.bytes = static_cast<double>(T * first->n_cols) * 4;  // the input, read once
  for (const WeightMatrix* w : ws) {
    // 2 x rows x cols x tokens; the weights as stored (dtype_row_bytes per row), the output.
    record.flops += 2.0 * static_cast<double>(w->n_rows * w->n_cols) * static_cast<double>(T);
    record.bytes += static_cast<double>(w->n_rows * dtype_row_bytes(w->dtype, w->n_cols)) +
                    static_cast<double>(T * w->n_rows) * 4;
  }
  timed([&] { backend_.matmul(x, T, ws, ys); }, [&] { return record; });
}

void DecoderModel::matmul_groups(const char* name, std::span<const MatmulGroup> groups) {
  if (observer_ == nullptr) return backend_.matmul_groups(groups);
  OpRecord record{OpGroup::Matmul, name};
  for (const MatmulGroup& g : groups) {
    record.bytes += static_cast<double>(g.rows * g.ws[0]->n_cols) * 4;
    for (const WeightMatrix* w : g.matrices()) {
      record.flops +=
          2.0 * static_cast<double>(w->n_rows * w->n_cols) * static_cast<double>(g.rows);
      record.bytes += static_cast<double>(w->n_rows * dtype_row_bytes(w->dtype, w->n_cols)) +
                      static_cast<double>(g.rows * w->n_rows) * 4;
    }
  }
  timed([&] { backend_.matmul_groups(groups); }, [&] { return record; });
}

void DecoderModel::silu_mul(float* gate, const float* up, int64_t rows, int64_t n) {
  timed([&] { backend_.silu_mul(gate, up, gate, rows, n); },
        [&] {
          return OpRecord{OpGroup::Elementwise, "silu_mul", 0, 0,
                          3.0 * static_cast<double>(rows * n) * 4};
        });
}

void DecoderModel::add_residual(int64_t layer, Sublayer sublayer, int64_t T) {
  const int64_t D = config_.d_model;
  timed([&] { backend_.add(x_.data(), tmp_.data(), T, D); },
        [&] {
          const auto n = static_cast<double>(T * D);
          return OpRecord{OpGroup::Elementwise, "residual add", 0, n, 3 * n * 4};
        });
  if (observer_ == nullptr) return;
  observer_->residual(layer, sublayer, backend_.to_host(tmp_.data(), T * D, observed_[0]),
                      backend_.to_host(x_.data(), T * D, observed_[1]));
  if (sublayer == Sublayer::Mlp) observe_logit_lens(layer, T);
}

void DecoderModel::observe_embedding(const Batch& batch) {
  observed_batch_ = &batch;  // until the next step's
  const int64_t T = batch.size(), D = config_.d_model;
  const std::span<const float> x = backend_.to_host(x_.data(), T * D, observed_[0]);
  observer_->residual(-1, Sublayer::Attention, x, x);
  observe_logit_lens(-1, T);
}

void DecoderModel::observe_attention_inputs(int64_t layer, int64_t T,
                                            const AttentionScores& scores) {
  const ModelConfig& c = config_;
  observer_->attention_inputs(layer, backend_.to_host(q_.data(), T * c.q_dim(), observed_[0]),
                              backend_.to_host(k_.data(), T * c.kv_dim(), observed_[1]),
                              backend_.to_host(v_.data(), T * c.kv_dim(), observed_[2]), scores);
}

// The residual as the model's head reads it: final norm, lm_head, soft-cap, for the observed
// sequence's tokens (the ops logits() runs on the logit rows).
void DecoderModel::observe_logit_lens(int64_t layer, int64_t T) {
  if (!observer_->wants_logit_lens()) return;
  const ModelConfig& c = config_;
  int64_t row0 = 0, n = T;
  if (observed_batch_ != nullptr && observed_batch_->observed_sequence >= 0) {
    const auto& seqs = observed_batch_->sequences;
    const auto index = static_cast<size_t>(observed_batch_->observed_sequence);
    row0 = 0;
    for (size_t i = 0; i < index; ++i) row0 += seqs[i].n_tokens;
    n = seqs[index].n_tokens;
  }
  if (n == 0) return;
  backend_.reserve(lens_x_, n * c.d_model);
  backend_.reserve(lens_logits_, n * c.vocab_size);
  ForwardObserver* observer = observer_;
  observer_ = nullptr;  // the lens is not part of the step's op times
  const float* x = x_.data() + row0 * c.d_model;
  if (c.norm == NormKind::Layer) {
    backend_.layernorm(x, weights_.final_norm, weights_.final_norm_bias, lens_x_.data(), n,
                       c.d_model, c.rms_norm_eps);
  } else {
    backend_.rmsnorm(x, weights_.final_norm, lens_x_.data(), n, c.d_model, c.rms_norm_eps);
  }
  backend_.matmul(lens_x_.data(), n, {&weights_.lm_head}, {lens_logits_.data()});
  if (c.final_softcap > 0.0f) {
    backend_.softcap(lens_logits_.data(), c.final_softcap, n, c.vocab_size);
  }
  observer_ = observer;
  observer_->logit_lens(layer,
                        backend_.to_host(lens_logits_.data(), n * c.vocab_size, observed_[0]));
}

OpRecord DecoderModel::attention_record(const Batch& batch, const KvStorage& kv,
                                        const AttentionScores& scores) const {
  OpRecord record{OpGroup::Attention, "attention"};
  const ModelConfig& c = config_;
  const KvShape& shape = kv.shape();
  const double key_bytes = static_cast<double>(c.n_kv_heads) *
                           static_cast<double>(shape.k_row_bytes() + shape.v_row_bytes());
  // q . k and p * v: 4 x head_dim per (query head, key); each sequence's keys read once.
  std::vector<int64_t> keys_of_sequence(batch.sequences.size(), 0);
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int64_t ctx = batch.positions[static_cast<size_t>(t)] + 1;
    const int64_t keys = ctx - scores.first_key(ctx);
    record.flops += 4.0 * static_cast<double>(c.head_dim * c.n_heads * keys);
    auto& k = keys_of_sequence[static_cast<size_t>(batch.sequence_of[static_cast<size_t>(t)])];
    k = std::max(k, keys);
  }
  for (int64_t keys : keys_of_sequence) record.bytes += key_bytes * static_cast<double>(keys);
  record.bytes += 2.0 * static_cast<double>(batch.size() * c.q_dim()) * 4;  // Q in, out
  return record;
}

}  // namespace ember
