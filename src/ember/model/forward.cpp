#include "ember/model/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ember/core/error.h"

namespace ember {

ForwardPass::ForwardPass(const ModelWeights& weights, KvBlockPool& kv_pool, ThreadPool& threads)
    : weights_(weights), kv_pool_(kv_pool), threads_(threads) {}

namespace {
// From this many tokens matmuls split over tokens (16-token groups) instead of output rows.
constexpr int64_t kTokenSplitMin = 64;
constexpr int64_t kTokenSplitGrain = 16;
}  // namespace

void ForwardPass::matmul_parallel(const float* x, int64_t T,
                                  std::initializer_list<const cpu::WeightMatrix*> ws,
                                  std::initializer_list<float*> ys) {
  // One parallel region over the concatenated output rows of all matrices, so Q/K/V (or gate/up)
  // share a single wake-up and their rows balance across threads together.
  const cpu::WeightMatrix* mats[4];
  float* outs[4];
  int64_t offsets[5] = {0};
  int n = 0;
  for (auto* w : ws) mats[n++] = w;
  n = 0;
  for (float* y : ys) outs[n++] = y;
  bool any_8bit = false, any_bf16 = false, any_f32_layout = false;
  for (int i = 0; i < n; ++i) {
    offsets[i + 1] = offsets[i] + mats[i]->n_rows;
    const DType dtype = mats[i]->dtype;
    const bool eight_bit = cpu::uses_8bit_activations(*mats[i], T);
    any_8bit = any_8bit || eight_bit;
    any_bf16 = any_bf16 || dtype == DType::BF16;
    any_f32_layout = any_f32_layout || (dtype != DType::BF16 && !eight_bit);
  }
  // Float weights (and Rows-layout quantized ones from kGemmMinTokens tokens on) read the
  // activations in the kernels' own layout (one for bf16, one for the rest): prepare each once,
  // split over threads in whole token groups.
  const int64_t K = mats[0]->n_cols;
  auto prepare = [&](DType dtype, AlignedVector<float>& out) {
    const auto floats = static_cast<size_t>(cpu::prepared_activation_floats(dtype, T, K));
    if (out.size() < floats) out.resize(floats);
    for_token_rows(
        T,
        [&](int64_t b, int64_t e) { cpu::prepare_activations(dtype, x, T, K, b, e, out.data()); },
        cpu::kPreparedTokenGrain);
  };
  if (any_bf16) prepare(DType::BF16, x_bf16_);
  if (any_f32_layout) prepare(DType::F32, x_float_);
  // Quantized weights (see uses_8bit_activations) multiply 8-bit activations: quantize the shared
  // input once, not per thread and matrix.
  if (any_8bit) {
    const size_t blocks = static_cast<size_t>(T * (K / kQuantBlock));
    if (x_q8_.size() < blocks) x_q8_.resize(blocks);
    for_token_rows(T, [&](int64_t b, int64_t e) {
      cpu::quantize_activations(x + b * K, e - b, K, x_q8_.data() + b * (K / kQuantBlock));
    });
  }
  if (T >= kTokenSplitMin && threads_.size() > 1) {
    // Prefill: each thread takes whole 16-token groups through every matrix (the last chunk also
    // takes the partial group, so every call has >= 16 tokens and the same bits as one call).
    const int64_t G = kTokenSplitGrain;
    threads_.parallel_for(T / G, [&](int64_t u0, int64_t u1, int) {
      const int64_t t0 = u0 * G, t1 = u1 == T / G ? T : u1 * G;
      for (int i = 0; i < n; ++i) {
        const int64_t N = mats[i]->n_rows;
        if (cpu::uses_8bit_activations(*mats[i], T)) {
          cpu::matmul_q8(x_q8_.data() + t0 * (K / kQuantBlock), t1 - t0, *mats[i], outs[i] + t0 * N,
                         N, 0, N);
          continue;
        }
        const DType dtype = mats[i]->dtype;
        const float* xp = dtype == DType::BF16 ? x_bf16_.data() : x_float_.data();
        const int64_t per_token = cpu::prepared_activation_floats(dtype, G, K) / G;
        cpu::matmul_prepared(xp + t0 * per_token, t1 - t0, *mats[i], outs[i] + t0 * N, N, 0, N);
      }
    });
    return;
  }
  threads_.parallel_for(
      offsets[n],
      [&](int64_t begin, int64_t end, int) {
        for (int i = 0; i < n; ++i) {
          int64_t b = std::max(begin, offsets[i]), e = std::min(end, offsets[i + 1]);
          if (b >= e) continue;
          if (cpu::uses_8bit_activations(*mats[i], T)) {
            cpu::matmul_q8(x_q8_.data(), T, *mats[i], outs[i], mats[i]->n_rows, b - offsets[i],
                           e - offsets[i]);
          } else {
            const float* xp = mats[i]->dtype == DType::BF16 ? x_bf16_.data() : x_float_.data();
            cpu::matmul_prepared(xp, T, *mats[i], outs[i], mats[i]->n_rows, b - offsets[i],
                                 e - offsets[i]);
          }
        }
      },
      // Multiples of 24 rows keep every tile shape whole (8, 6, 4, 3 rows; 24-row panels).
      /*grain=*/24);
}

const std::vector<float>& ForwardPass::step(const StepInput& input) {
  const ModelConfig& c = weights_.config;
  const int64_t T = static_cast<int64_t>(input.tokens.size());
  const int64_t D = c.d_model;
  int64_t covered = 0;
  for (const auto& s : input.sequences) covered += s.n_tokens;
  if (covered != T)
    throw Error("forward step: sequences cover " + std::to_string(covered) +
                " tokens but the batch has " + std::to_string(T));
  auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(x_, T * D);
  grow(xn_, T * D);
  grow(tmp_, T * D);
  grow(q_, T * c.q_dim());
  grow(attn_, T * c.q_dim());
  grow(k_, T * c.kv_dim());
  grow(v_, T * c.kv_dim());
  grow(gate_, T * c.d_ffn);
  grow(up_, T * c.d_ffn);
  positions_.resize(static_cast<size_t>(T));
  token_seq_.resize(static_cast<size_t>(T));
  int64_t t = 0;
  for (const auto& s : input.sequences) {
    for (int64_t i = 0; i < s.n_tokens; ++i, ++t) {
      positions_[t] = static_cast<int32_t>(s.start_position + i);
      token_seq_[t] = &s;
    }
  }

  // W_E gather: x[t] = embed[token[t]].
  for (int64_t i = 0; i < T; ++i) {
    int32_t token = input.tokens[i];
    if (token < 0 || token >= c.vocab_size) {
      throw Error("token id " + std::to_string(token) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
    }
    cpu::dequantize_row(weights_.embed, token, x_.data() + i * D);
  }

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = weights_.layers[l];
    attention_block(l, lw, T);
    mlp_block(lw, T);
  }

  // Final norm and lm_head only for the rows whose logits are wanted.
  const int64_t R = static_cast<int64_t>(input.logit_rows.size());
  grow(final_rows_, R * D);
  for (int64_t r = 0; r < R; ++r) {
    int32_t row = input.logit_rows[r];
    if (row < 0 || row >= T) throw Error("forward step: logit row out of range");
    cpu::rmsnorm(x_.data() + row * D, weights_.final_norm, final_rows_.data() + r * D, 1, D,
                 c.rms_norm_eps);
  }
  logits_.resize(static_cast<size_t>(R * c.vocab_size));
  if (R > 0) matmul_parallel(final_rows_.data(), R, {&weights_.lm_head}, {logits_.data()});
  return logits_;
}

void ForwardPass::attention_block(int64_t layer, const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = weights_.config;
  const int64_t D = c.d_model, qd = c.q_dim(), kvd = c.kv_dim();
  for_token_rows(T, [&](int64_t b, int64_t e) {
    cpu::rmsnorm(x_.data() + b * D, lw.attn_norm, xn_.data() + b * D, e - b, D, c.rms_norm_eps);
  });
  matmul_parallel(xn_.data(), T, {&lw.wq, &lw.wk, &lw.wv}, {q_.data(), k_.data(), v_.data()});

  // Bias, RoPE, and this step's K/V into each token's cache slot (block_table[pos / bs], slot
  // pos % bs), row by row.
  const int64_t bs = kv_pool_.block_size();
  const DType kv_dtype = kv_pool_.dtype();
  for_token_rows(T, [&](int64_t b, int64_t e) {
    if (lw.bq != nullptr) {
      for (int64_t t = b; t < e; ++t) {
        cpu::add_inplace(q_.data() + t * qd, lw.bq, qd);
        cpu::add_inplace(k_.data() + t * kvd, lw.bk, kvd);
        cpu::add_inplace(v_.data() + t * kvd, lw.bv, kvd);
      }
    }
    cpu::rope(q_.data() + b * qd, e - b, c.n_heads, c.head_dim, c.rope_dim, positions_.data() + b,
              weights_.rope_inv_freq.data());
    cpu::rope(k_.data() + b * kvd, e - b, c.n_kv_heads, c.head_dim, c.rope_dim,
              positions_.data() + b, weights_.rope_inv_freq.data());
    for (int64_t t = b; t < e; ++t) {
      int64_t pos = positions_[t];
      int32_t block = token_seq_[t]->block_table[pos / bs];
      for (int64_t g = 0; g < c.n_kv_heads; ++g) {
        const int64_t off = kv_pool_.row_offset(block, pos % bs, g);
        const int64_t src = t * kvd + g * c.head_dim;
        cpu::store_kv(k_.data() + src, c.head_dim, kv_dtype, kv_pool_.k_at(layer, off));
        cpu::store_kv(v_.data() + src, c.head_dim, kv_dtype, kv_pool_.v_at(layer, off));
      }
    }
  });

  cpu::PagedKv view = kv_pool_.layer_view(layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Work items are (query tile, kv head): a tile is up to kAttentionTile consecutive tokens of one
  // sequence, which read each K/V block once together; splitting by kv head lets even a single
  // decode token's heads run on several threads.
  constexpr int64_t kAttentionTile = 8;
  attention_tiles_.clear();
  for (int64_t t = 0; t < T;) {
    int64_t e = t + 1;
    while (e < T && e - t < kAttentionTile && token_seq_[e] == token_seq_[t] &&
           positions_[e] == positions_[e - 1] + 1) {
      ++e;
    }
    attention_tiles_.push_back({t, e - t});
    t = e;
  }
  const int64_t n_kv = c.n_kv_heads;
  const int64_t n_items = static_cast<int64_t>(attention_tiles_.size()) * n_kv;
  // Items run last tile first: with causal attention the late tiles cost the most, and handing them
  // out first keeps the threads' finishing times close.
  threads_.parallel_for(n_items, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end;) {
      const int64_t g0 = i % n_kv, g1 = std::min(n_kv, g0 + (end - i));
      const auto [t, nt] =
          attention_tiles_[attention_tiles_.size() - 1 - static_cast<size_t>(i / n_kv)];
      // The next call's first K/V blocks start loading while this one computes.
      if (const int64_t next = i + (g1 - g0); next < end) {
        const auto [next_t, next_nt] =
            attention_tiles_[attention_tiles_.size() - 1 - static_cast<size_t>(next / n_kv)];
        cpu::prefetch_kv_context(view, token_seq_[next_t]->block_table,
                                 positions_[next_t] + next_nt, next % n_kv);
      }
      cpu::attention_tokens(q_.data() + t * qd, nt, qd, c.n_heads, view, token_seq_[t]->block_table,
                            positions_[t] + 1, scale, attn_.data() + t * qd, qd, g0, g1);
      i += g1 - g0;
    }
  });

  matmul_parallel(attn_.data(), T, {&lw.wo}, {tmp_.data()});
  for_token_rows(T, [&](int64_t b, int64_t e) {
    cpu::add_inplace(x_.data() + b * D, tmp_.data() + b * D, (e - b) * D);
  });
}

void ForwardPass::mlp_block(const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = weights_.config;
  const int64_t D = c.d_model, F = c.d_ffn;
  for_token_rows(T, [&](int64_t b, int64_t e) {
    cpu::rmsnorm(x_.data() + b * D, lw.ffn_norm, xn_.data() + b * D, e - b, D, c.rms_norm_eps);
  });
  matmul_parallel(xn_.data(), T, {&lw.w_gate, &lw.w_up}, {gate_.data(), up_.data()});
  for_token_rows(T, [&](int64_t b, int64_t e) {
    cpu::silu_mul(gate_.data() + b * F, up_.data() + b * F, gate_.data() + b * F, (e - b) * F);
  });
  matmul_parallel(gate_.data(), T, {&lw.w_down}, {tmp_.data()});
  for_token_rows(T, [&](int64_t b, int64_t e) {
    cpu::add_inplace(x_.data() + b * D, tmp_.data() + b * D, (e - b) * D);
  });
}

}  // namespace ember
