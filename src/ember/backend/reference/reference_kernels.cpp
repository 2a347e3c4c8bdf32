// Plain scalar references: the simplest correct code, accumulating in double. Tests compare every
// optimised kernel against these; speed does not matter here.
#include "ember/backend/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ember/backend/cpu/kv_channel_query.h"
#include "ember/backend/cpu/kv_query_q8.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/dequantize.h"
#include "ember/core/half.h"

namespace ember::reference {

using cpu::q4_0_block;
using cpu::q8_0_block;
using cpu::uses_8bit_activations;

void dequantize_row(const WeightMatrix& table, int64_t row, float* out) {
  const uint8_t* base = static_cast<const uint8_t*>(table.data) + row * table.row_bytes;
  const int64_t n = table.n_cols;
  std::vector<uint8_t> plain;
  if (table.layout == WeightLayout::AmxTiles) {  // bf16 packed for the cpu backend's AMX tiles
    plain.resize(static_cast<size_t>(table.row_bytes));
    cpu::rows_layout_row(table, row, plain.data());
    base = plain.data();
  }
  switch (table.dtype) {
    case DType::F32:
      std::memcpy(out, base, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, base + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, base + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case DType::Q8_0: {
      for (int64_t i = 0; i < n; ++i) {
        const BlockQ8_0 b = q8_0_block(table, row, i / kQuantBlock);
        out[i] = f16_to_f32(b.d) * static_cast<float>(b.qs[i % kQuantBlock]);
      }
      break;
    }
    case DType::Q4_0: {
      for (int64_t i = 0; i < n; ++i) {
        const BlockQ4_0 b = q4_0_block(table, row, i / kQuantBlock);
        const int j = static_cast<int>(i % kQuantBlock);
        // Byte j holds value j (low nibble) and value j + 16 (high nibble).
        const int nibble = j < 16 ? (b.qs[j] & 0x0f) : (b.qs[j - 16] >> 4);
        out[i] = f16_to_f32(b.d) * static_cast<float>(nibble - 8);
      }
      break;
    }
    default: {  // the other block types; interleaved ones (q5_0, iq4_nl) read back as Rows bytes
      if (table.layout == WeightLayout::Interleaved8) {
        plain.resize(static_cast<size_t>(table.row_bytes));
        cpu::rows_layout_row(table, row, plain.data());
        base = plain.data();
      }
      ember::dequantize_row(table.dtype, base, out, n);
      break;
    }
  }
}

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  const int64_t K = w.n_cols;
  if (uses_8bit_activations(w, T)) {  // see kernels.h
    std::vector<BlockQ8Act> xq(static_cast<size_t>(T * (K / kQuantBlock)));
    reference::quantize_activations(x, T, K, xq.data());
    reference::matmul_q8(xq.data(), T, w, y, ldy, row_begin, row_end);
    return;
  }
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = row_begin; n < row_end; ++n) {
    reference::dequantize_row(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(x[t * K + k]) * row[k];
      y[t * ldy + n] = static_cast<float>(sum);
    }
  }
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[t * D + i]) * x[t * D + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    for (int64_t i = 0; i < D; ++i) {
      y[t * D + i] = static_cast<float>(x[t * D + i] * inv * weight[i]);
    }
  }
}

void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq) {
  const int64_t half = rope_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // The angle is a float product, as HF computes it; cos/sin in double.
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += e[i] = std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[i] / sum);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void attention(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
               int64_t ctx_len, const AttentionScores& scores, float* out) {
  const int64_t hd = kv.head_dim;
  const int64_t n_kv = kv.n_kv_heads;
  const int64_t group = n_heads / n_kv;
  // Gather K/V [ctx_len, n_kv, hd] contiguously through the block table.
  std::vector<float> k(static_cast<size_t>(ctx_len * n_kv * hd));
  std::vector<float> v(k.size());
  const int64_t first = scores.first_key(ctx_len);  // sliding window
  // Positions before the window are never read: their blocks may be back in the pool.
  for (int64_t p = first; p < ctx_len; ++p) {
    for (int64_t g = 0; g < n_kv; ++g) {
      const int32_t block = block_table[p / kv.block_size];
      const int64_t row = kv.row_index(block, p % kv.block_size, g);
      float* k_row = &k[static_cast<size_t>((p * n_kv + g) * hd)];
      const float* read = kv.read_k(block, p, ctx_len - 1, g, k_row);
      if (read != k_row) std::copy(read, read + hd, k_row);
      kv_read_row(kv.v_row(row), hd, kv.v_dtype, &v[static_cast<size_t>((p * n_kv + g) * hd)]);
    }
  }
  // A q8_0 K cache scores against the query rounded to q8_0 as well (kv_query_q8.h: what the cpu
  // backend's integer dot products compute), here as the exact values dq * q8.
  std::vector<double> qs(q, q + n_heads * hd);
  if (cpu::kv_scores_in_int8(kv.k_dtype, hd, kv.k_channel)) {
    std::vector<BlockQ8Act> q8(static_cast<size_t>(hd / kQuantBlock));
    for (int64_t h = 0; h < n_heads; ++h) {
      reference::quantize_activations(q + h * hd, 1, hd, q8.data());
      for (int64_t d = 0; d < hd; ++d) {
        qs[h * hd + d] =
            static_cast<double>(q8[d / kQuantBlock].d) * q8[d / kQuantBlock].qs[d % kQuantBlock];
      }
    }
  }
  // Per-channel q4_0 K: each sealed block scores against the query folded into its scales and
  // rounded (kv_channel_query.h), here as a * I + sum_c q_c m_c in double; the query's own block
  // from the exact rows.
  const int64_t own_block = ctx_len > 0 ? (ctx_len - 1) / kv.block_size : 0;
  cpu::ChannelQuery folded;
  const uint8_t* folded_region = nullptr;
  double folded_bias = 0.0;
  std::vector<double> s(static_cast<size_t>(ctx_len));
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / group;
    double mx = -INFINITY;
    for (int64_t p = first; p < ctx_len; ++p) {
      double dot = 0.0;
      if (kv.k_channel && p / kv.block_size != own_block) {
        const uint8_t* region = kv.k_region(block_table[p / kv.block_size], g);
        if (region != folded_region) {
          cpu::fold_channel_query(q + h * hd, region, hd, folded);
          const uint16_t* min = reinterpret_cast<const uint16_t*>(region) + hd;
          folded_bias = 0.0;
          for (int64_t d = 0; d < hd; ++d) {
            folded_bias += static_cast<double>(q[h * hd + d]) * f16_to_f32(min[d]);
          }
          folded_region = region;
        }
        dot = static_cast<double>(folded.a) *
                  cpu::channel_key_dot(folded, region, p % kv.block_size, hd, kv.block_size) +
              folded_bias;
      } else {
        for (int64_t d = 0; d < hd; ++d) dot += qs[h * hd + d] * k[(p * n_kv + g) * hd + d];
      }
      s[p] = dot * scores.scale;
      if (scores.softcap > 0.0f) s[p] = scores.softcap * std::tanh(s[p] / scores.softcap);
      mx = std::max(mx, s[p]);
    }
    double sum = 0.0;
    for (int64_t p = first; p < ctx_len; ++p) sum += s[p] = std::exp(s[p] - mx);
    for (int64_t d = 0; d < hd; ++d) {
      double acc = 0.0;
      for (int64_t p = first; p < ctx_len; ++p) acc += s[p] * v[(p * n_kv + g) * hd + d];
      out[h * hd + d] = ctx_len > 0 ? static_cast<float>(acc / sum) : 0.0f;
    }
  }
}

}  // namespace ember::reference
