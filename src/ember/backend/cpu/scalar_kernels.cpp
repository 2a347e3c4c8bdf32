// The portable path (Isa::Scalar): tidy float loops with a fixed accumulation order, no
// intrinsics. Used when the CPU lacks AVX2 or EMBER_ISA=scalar.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/kv_channel_query.h"
#include "ember/backend/cpu/kv_query_q8.h"
#include "ember/backend/kv_row_format.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"

namespace ember::cpu::scalar {
namespace {

// Per-thread scratch that only grows, so the hot path does not allocate after warm-up.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// sum_k a[k] * b[k] with four interleaved partial sums, always combined the same way.
float dot(const float* a, const float* b, int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

// Converting the dtype is exact, so the reference conversion is the scalar path's too.
void dequantize_row(const WeightMatrix& table, int64_t row, float* out) {
  reference::dequantize_row(table, row, out);
}

// Each weight row is converted to f32 once per call and reused for all T tokens. y[t, n] depends
// only on x[t] and row n, so any row split or T gives the same bits (quantized weights: within
// the ranges of T where they take 8-bit activations or not, see uses_8bit_activations).
void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  if (uses_8bit_activations(w, T)) {
    thread_local std::vector<BlockQ8Act> xq;
    const auto blocks = static_cast<size_t>(T * (w.n_cols / kQuantBlock));
    if (xq.size() < blocks) xq.resize(blocks);
    scalar::quantize_activations(x, T, w.n_cols, xq.data());
    scalar::matmul_q8(xq.data(), T, w, y, ldy, row_begin, row_end);
    return;
  }
  thread_local std::vector<float> row_buf;
  const int64_t K = w.n_cols;
  float* converted = scratch(row_buf, K);
  for (int64_t n = row_begin; n < row_end; ++n) {
    const float* row = converted;
    if (w.dtype == DType::F32) {  // used in place
      row = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) + n * w.row_bytes);
    } else {
      scalar::dequantize_row(w, n, converted);
    }
    for (int64_t t = 0; t < T; ++t) y[t * ldy + n] = dot(x + t * K, row, K);
  }
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * D;
    const float ss = dot(xt, xt, D);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int64_t i = 0; i < D; ++i) y[t * D + i] = xt[i] * inv * weight[i];
  }
}

// cos/sin depend on (token, i) only, so they are computed once per token for all heads.
void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq) {
  thread_local std::vector<float> cs_buf;
  const int64_t half = rope_dim / 2;
  float* cs = scratch(cs_buf, 2 * half);  // [cos x half, sin x half]
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cs[i] = std::cos(angle);
      cs[half + i] = std::sin(angle);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * cs[half + i];
        v[i + half] = b * cs[i] + a * cs[half + i];
      }
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - mx);
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    const float gelu = g / (1.0f + std::exp(-2.0f * u));
    out[i] = up != nullptr ? gelu * up[i] : gelu;
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void store_kv(const float* x, int64_t n, DType dtype, void* out) {
  kv_write_row(x, n, dtype, out);
}

// One pass over the context per query head with an online softmax: running max m, running
// denominator l and an unnormalised output accumulator acc [head_dim], rescaled when m grows.
namespace {

// A K or V row of hd values as f32: in place for F32, widened into buf for the other dtypes.
const float* kv_row(const uint8_t* row, DType dtype, int64_t hd, float* buf) {
  if (dtype == DType::F32) return reinterpret_cast<const float*>(row);
  kv_read_row(row, hd, dtype, buf);
  return buf;
}

// The keys [key_begin, key_end) of one token's context for the query heads of kv heads
// [kv_head_begin, kv_head_end), segment by segment (attention_segment_keys): each segment's online
// softmax starts afresh and is folded into the head's total (fold_attention_state). partial null:
// out gets the normalised heads; else the range is one segment and partial [group][hd + 2] its
// unnormalised states.
void attention_keys(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
                    int64_t ctx_len, const AttentionScores& scores, int64_t key_begin,
                    int64_t key_end, float* out, float* partial, int64_t kv_head_begin,
                    int64_t kv_head_end) {
  thread_local std::vector<float> acc_buf;
  const int64_t hd = kv.head_dim;
  const int64_t group = n_heads / kv.n_kv_heads;
  const int64_t segment_keys = attention_segment_keys(kv.block_size);
  // acc, then K and V rows widened from f16, then the head's folded total
  float* acc = scratch(acc_buf, 4 * hd);
  float* k_buf = acc + hd;
  float* v_buf = acc + 2 * hd;
  float* total = acc + 3 * hd;
  const int64_t first = std::max(key_begin, scores.first_key(ctx_len));
  const int64_t last = std::min(key_end, ctx_len);
  // A q8_0 K cache: integer scores against the query rounded to q8_0 (kv_query_q8.h).
  const bool int8_keys = kv_scores_in_int8(kv.k_dtype, hd, kv.k_channel);
  thread_local std::vector<BlockQ8Act> q8;
  if (int8_keys) q8.resize(static_cast<size_t>(hd / kQuantBlock));
  // Per-channel q4_0 K: sealed blocks scored in integers against the query folded into each
  // block's scales (kv_channel_query.h), the token's own block from its exact rows.
  thread_local ChannelQuery folded;
  const uint8_t* folded_region = nullptr;
  const int64_t own_block = (ctx_len - 1) / kv.block_size;
  for (int64_t h = kv_head_begin * group; h < kv_head_end * group; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * hd;
    if (int8_keys) scalar::quantize_activations(qh, 1, hd, q8.data());
    folded_region = nullptr;
    float m = -INFINITY, l = 0.0f, total_m = -INFINITY, total_l = 0.0f;
    std::fill(acc, acc + hd, 0.0f);
    for (int64_t p = first; p < last; ++p) {
      if (p % segment_keys == 0 && p > first) {  // a new segment: fold the last one, start afresh
        fold_attention_state(total, &total_m, &total_l, acc, m, l, hd);
        m = -INFINITY;
        l = 0.0f;
        std::fill(acc, acc + hd, 0.0f);
      }
      const int32_t block = block_table[p / kv.block_size];
      const int64_t row = kv.row_index(block, p % kv.block_size, g);
      const float* v = kv_row(kv.v_row(row), kv.v_dtype, hd, v_buf);
      float s;
      if (int8_keys) {
        s = q8_key_score(q8.data(), reinterpret_cast<const BlockQ8_0*>(kv.k_row(row)), hd,
                         scores.scale);
      } else if (kv.k_channel && p / kv.block_size != own_block) {
        const uint8_t* region = kv.k_region(block, g);
        if (region != folded_region) fold_channel_query(qh, region, hd, folded);
        folded_region = region;
        s = channel_key_score(folded, region, p % kv.block_size, hd, kv.block_size, scores.scale);
      } else {
        s = dot(qh, kv.read_k(block, p, ctx_len - 1, g, k_buf), hd) * scores.scale;
      }
      if (scores.softcap > 0.0f) s = scores.softcap * std::tanh(s / scores.softcap);
      if (s > m) {
        const float c = std::exp(m - s);  // 0 on the first position (m = -inf)
        l *= c;
        for (int64_t d = 0; d < hd; ++d) acc[d] *= c;
        m = s;
      }
      const float e = std::exp(s - m);
      l += e;
      for (int64_t d = 0; d < hd; ++d) acc[d] += e * v[d];
    }
    if (partial != nullptr) {
      float* state = partial + (h - kv_head_begin * group) * (hd + 2);
      std::copy(acc, acc + hd, state);
      state[hd] = m;
      state[hd + 1] = l;
      continue;
    }
    fold_attention_state(total, &total_m, &total_l, acc, m, l, hd);
    const float inv = total_l > 0.0f ? 1.0f / total_l : 0.0f;
    for (int64_t d = 0; d < hd; ++d) out[h * hd + d] = total_m == -INFINITY ? 0.0f : total[d] * inv;
  }
}

}  // namespace

// Token by token: each runs exactly its single-token computation.
void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end) {
  for (int64_t u = 0; u < nt; ++u) {
    attention_keys(q + u * q_stride, n_heads, kv, block_table, ctx0 + u, scores, 0, ctx0 + u,
                   out + u * out_stride, nullptr, kv_head_begin, kv_head_end);
  }
}

void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment,
                       float* partial) {
  const int64_t keys = attention_segment_keys(kv.block_size);
  attention_keys(q, n_heads, kv, block_table, ctx_len, scores, segment * keys, (segment + 1) * keys,
                 nullptr, partial, kv_head_begin, kv_head_end);
}

// The scalar matmul reads activations as they are: the prepared layout is a copy of x [T, K].
int64_t prepared_activation_floats(DType /*dtype*/, int64_t T, int64_t K) {
  return T * K;
}

void prepare_activations(DType /*dtype*/, const float* x, int64_t /*T*/, int64_t K,
                         int64_t token_begin, int64_t token_end, float* xp) {
  std::copy(x + token_begin * K, x + token_end * K, xp + token_begin * K);
}

void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end) {
  scalar::matmul(xp, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::scalar
