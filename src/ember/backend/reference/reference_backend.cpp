#include "ember/backend/reference/reference_backend.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/backend/cpu/host_kv_storage.h"
#include "ember/backend/kv_row_format.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/error.h"
#include "ember/core/half.h"

namespace ember::reference {

ReferenceBackend::ReferenceBackend(const BackendOptions&) {}

BackendInfo ReferenceBackend::info() const {
  BackendInfo i;
  i.name = "reference";
  i.kernels = "scalar-reference";
  i.threads = 1;
  for (const auto& [p, n] : ranges_) i.weight_bytes_owned += static_cast<int64_t>(n);
  return i;
}

uint8_t* ReferenceBackend::allocate(size_t bytes) {
  blocks_.push_back(std::make_unique<uint8_t[]>(bytes));
  ranges_.emplace_back(blocks_.back().get(), bytes);
  return blocks_.back().get();
}

bool ReferenceBackend::owns_weight(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const auto& [start, n] : ranges_) {
    if (b >= start && b < start + n) return true;
  }
  return false;
}

WeightMatrix ReferenceBackend::upload_matrix(const WeightMatrix& host, bool) {
  WeightMatrix out = host;
  uint8_t* dst = allocate(static_cast<size_t>(host.bytes()));
  std::memcpy(dst, host.data, static_cast<size_t>(host.bytes()));
  out.data = dst;
  return out;
}

const float* ReferenceBackend::upload_vector(const float* host, int64_t n) {
  auto* dst = reinterpret_cast<float*>(allocate(static_cast<size_t>(n) * sizeof(float)));
  std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(float));
  return dst;
}

std::unique_ptr<KvStorage> ReferenceBackend::allocate_kv(const KvShape& shape) {
  return std::make_unique<cpu::HostKvStorage>(shape);
}

std::shared_ptr<float> ReferenceBackend::allocate_activations(int64_t floats) {
  return std::shared_ptr<float>(new float[static_cast<size_t>(floats)](),
                                std::default_delete<float[]>());
}

std::span<const float> ReferenceBackend::to_host(const float* data, int64_t n,
                                                 std::vector<float>&) {
  return {data, static_cast<size_t>(n)};
}

void ReferenceBackend::embed(const WeightMatrix& table, const Batch& batch, float* x) {
  for (int64_t i = 0; i < batch.size(); ++i) {
    const int32_t token = batch.tokens[static_cast<size_t>(i)];
    check_token(token, table);
    dequantize_row(table, token, x + i * table.n_cols);
  }
}

void ReferenceBackend::rmsnorm(const float* x, const float* weight, float* y, int64_t rows,
                               int64_t D, float eps) {
  reference::rmsnorm(x, weight, y, rows, D, eps);
}

void ReferenceBackend::matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
                              std::span<float* const> ys) {
  if (ws.size() != ys.size()) throw Error("reference matmul: one output per matrix");
  for (size_t i = 0; i < ws.size(); ++i) {
    reference::matmul(x, rows, *ws[i], ys[i], ws[i]->n_rows, 0, ws[i]->n_rows);
  }
}

void ReferenceBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += bias[i];
  }
}

void ReferenceBackend::rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                            const float* inv_freq, const Batch& batch) {
  reference::rope(x, batch.size(), n_heads, head_dim, rope_dim, batch.positions.data(), inv_freq);
}

void ReferenceBackend::store_kv(KvStorage& kv, int64_t layer, const float* k, const float* v,
                                const Batch& batch) {
  auto& cache = static_cast<cpu::HostKvStorage&>(kv);
  const KvShape& s = cache.shape();
  const int64_t kvd = s.n_kv_heads * s.head_dim;
  if (s.k_channel_scales) cache.begin_k_writes(layer, batch);
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int64_t pos = batch.positions[t];
    const BatchSequence& seq = batch.sequences[static_cast<size_t>(batch.sequence_of[t])];
    const int32_t block = block_table_of(seq, kv)[pos / s.block_size];
    for (int64_t g = 0; g < s.n_kv_heads; ++g) {
      const int64_t row = cache.row_index(block, pos % s.block_size, g);
      std::vector<float> k_row(k + t * kvd + g * s.head_dim, k + t * kvd + (g + 1) * s.head_dim);
      if (s.rotate_k) kv_rotate(k_row.data(), s.head_dim);
      if (s.k_channel_scales) {  // exact until the block is sealed (host_kv_storage.h)
        kv_write_row(k_row.data(), s.head_dim, DType::F16,
                     cache.k_exact_row(layer, block, pos % s.block_size, g));
      } else {
        kv_write_row(k_row.data(), s.head_dim, s.k_dtype, cache.k_at(layer, row));
      }
      kv_write_row(v + t * kvd + g * s.head_dim, s.head_dim, s.v_dtype, cache.v_at(layer, row));
    }
  }
  if (s.k_channel_scales) cache.seal_k_blocks(layer, batch);
}

void ReferenceBackend::rope_store_kv(KvStorage& kv, int64_t layer, float* q, float* k,
                                     const float* v, int64_t n_heads, int64_t rope_dim,
                                     const float* inv_freq, const Batch& batch) {
  const KvShape& s = kv.shape();
  rope(q, n_heads, s.head_dim, rope_dim, inv_freq, batch);
  rope(k, s.n_kv_heads, s.head_dim, rope_dim, inv_freq, batch);
  store_kv(kv, layer, k, v, batch);
}

void ReferenceBackend::attention(const KvStorage& kv, int64_t layer, const float* q,
                                 int64_t n_heads, const AttentionScores& scores, const Batch& batch,
                                 float* out) {
  const auto& cache = static_cast<const cpu::HostKvStorage&>(kv);
  const cpu::PagedKv view = cache.layer_view(layer);
  const int64_t qd = n_heads * view.head_dim;
  std::vector<float> q_rotated;
  if (view.k_rotated) {
    // The cache holds H k: scores need H q.
    q_rotated.assign(q, q + batch.size() * qd);
    for (int64_t r = 0; r < batch.size() * n_heads; ++r) {
      kv_rotate(q_rotated.data() + r * view.head_dim, view.head_dim);
    }
    q = q_rotated.data();
  }
  for (int64_t t = 0; t < batch.size(); ++t) {
    const BatchSequence& seq = batch.sequences[static_cast<size_t>(batch.sequence_of[t])];
    reference::attention(q + t * qd, n_heads, view, block_table_of(seq, kv), batch.positions[t] + 1,
                         scores, out + t * qd);
  }
}

void ReferenceBackend::silu_mul(const float* gate, const float* up, float* out, int64_t rows,
                                int64_t n) {
  reference::silu_mul(gate, up, out, rows * n);
}

void ReferenceBackend::gelu_mul(const float* gate, const float* up, float* out, int64_t rows,
                                int64_t n) {
  for (int64_t i = 0; i < rows * n; ++i) {
    const double g = gate[i];
    const double gelu =
        0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    out[i] = static_cast<float>(up != nullptr ? gelu * up[i] : gelu);
  }
}

void ReferenceBackend::layernorm(const float* x, const float* weight, const float* bias, float* y,
                                 int64_t rows, int64_t D, float eps) {
  for (int64_t t = 0; t < rows; ++t) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < D; ++i) mean += x[t * D + i];
    mean /= static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(D) + eps);
    for (int64_t i = 0; i < D; ++i) {
      y[t * D + i] = static_cast<float>((x[t * D + i] - mean) * inv * weight[i] + bias[i]);
    }
  }
}

void ReferenceBackend::scale(float* x, float s, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows * n; ++i) x[i] *= s;
}

void ReferenceBackend::softcap(float* x, float cap, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows * n; ++i) {
    x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
  }
}

void ReferenceBackend::add_position_embeddings(const WeightMatrix& table, const Batch& batch,
                                               float* x) {
  const int64_t D = table.n_cols;
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int32_t pos = batch.positions[static_cast<size_t>(t)];
    check_position(pos, table);
    dequantize_row(table, pos, row.data());
    for (int64_t i = 0; i < D; ++i) x[t * D + i] += row[static_cast<size_t>(i)];
  }
}

void ReferenceBackend::add(float* y, const float* x, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows * n; ++i) y[i] += x[i];
}

void ReferenceBackend::gather_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                                   float* out) {
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(out + static_cast<int64_t>(r) * D, x + rows[r] * D,
                static_cast<size_t>(D) * sizeof(float));
  }
}

void ReferenceBackend::scatter_add_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                                        std::span<const float> scales, float* y) {
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t i = 0; i < D; ++i) {
      y[rows[r] * D + i] =
          static_cast<float>(static_cast<double>(y[rows[r] * D + i]) +
                             static_cast<double>(scales[r]) * x[static_cast<int64_t>(r) * D + i]);
    }
  }
}

void ReferenceBackend::zero(float* x, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows * n; ++i) x[i] = 0.0f;
}

}  // namespace ember::reference
