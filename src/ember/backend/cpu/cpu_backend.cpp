#include "ember/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/compute_probe.h"
#include "ember/backend/cpu/host_kv_storage.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/error.h"

namespace ember::cpu {

CpuBackend::CpuBackend(const BackendOptions& options)
    : options_(options), threads_(options.n_threads) {}

BackendInfo CpuBackend::info() const {
  BackendInfo i;
  i.name = "cpu";
  i.kernels = isa_name(active_isa());
  i.threads = threads_.size();
  i.weight_bytes_owned = static_cast<int64_t>(arena_.reserved_bytes());
  i.weight_bytes_huge_pages = static_cast<int64_t>(arena_.huge_backed_bytes());
  return i;
}

WeightMatrix CpuBackend::upload_matrix(const WeightMatrix& host, bool host_is_file) {
  // q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs are interleaved 8 rows at a time for the
  // integer tiles (weight_layout.h: has_interleaved_layout); other matrices are read in place from
  // the file unless --no-mmap asked for a copy in huge pages.
  // With the AMX kernel set, bf16 matrices are packed into 1 KiB tiles for TDPBF16PS
  // (amx_weight_tiles.h); the decode kernel of that set reads the same tiles.
  if (host.dtype == DType::BF16 && active_isa() == Isa::Amx) {
    const int64_t bytes = amx_tiles_bytes(host.n_rows, host.n_cols);
    return pack_amx_tiles(host, arena_.allocate(static_cast<size_t>(bytes)));
  }
  if (options_.interleave_quantized && has_interleaved_layout(host.dtype)) {
    const int64_t bytes =
        weight_matrix_bytes(host.dtype, host.n_rows, host.n_cols, WeightLayout::Interleaved8);
    return interleave_rows(host, arena_.allocate(static_cast<size_t>(bytes)));
  }
  if (host_is_file && !options_.copy_weights) return host;
  WeightMatrix out = host;
  auto* dst = arena_.allocate(static_cast<size_t>(host.bytes()));
  std::memcpy(dst, host.data, static_cast<size_t>(host.bytes()));
  out.data = dst;
  return out;
}

const float* CpuBackend::upload_vector(const float* host, int64_t n) {
  auto* dst = reinterpret_cast<float*>(arena_.allocate(static_cast<size_t>(n) * sizeof(float)));
  std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(float));
  return dst;
}

std::unique_ptr<KvStorage> CpuBackend::allocate_kv(const KvShape& shape) {
  return std::make_unique<HostKvStorage>(shape);
}

std::shared_ptr<float> CpuBackend::allocate_activations(int64_t floats) {
  // 64-byte aligned for the kernels' vector loads.
  const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(::operator new (bytes, std::align_val_t{64}));
  return std::shared_ptr<float>(p, [](float* q) { ::operator delete (q, std::align_val_t{64}); });
}

std::span<const float> CpuBackend::to_host(const float* data, int64_t n, std::vector<float>&) {
  return {data, static_cast<size_t>(n)};
}

void CpuBackend::embed(const WeightMatrix& table, const Batch& batch, float* x) {
  const int64_t D = table.n_cols;
  for (int64_t i = 0; i < batch.size(); ++i) {
    const int32_t token = batch.tokens[static_cast<size_t>(i)];
    check_token(token, table);
    dequantize_row(table, token, x + i * D);
  }
}

void CpuBackend::rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
                         float eps) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    cpu::rmsnorm(x + b * D, weight, y + b * D, e - b, D, eps);
  });
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) add_inplace(y + t * n, bias, n);
  });
}

void CpuBackend::rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                      const float* inv_freq, const Batch& batch) {
  const int64_t width = n_heads * head_dim;
  for_token_rows(batch.size(), [&](int64_t b, int64_t e) {
    cpu::rope(x + b * width, e - b, n_heads, head_dim, rope_dim, batch.positions.data() + b,
              inv_freq);
  });
}

void CpuBackend::store_rows(KvStorage& kv, int64_t layer, const float* k, const float* v,
                            const Batch& batch, int64_t b, int64_t e) {
  auto& cache = static_cast<HostKvStorage&>(kv);
  const KvShape& s = cache.shape();
  const int64_t kvd = s.n_kv_heads * s.head_dim;
  thread_local std::vector<float> rotated;
  if (s.rotate_k) rotated.resize(static_cast<size_t>(s.head_dim));
  for (int64_t t = b; t < e; ++t) {
    const int64_t pos = batch.positions[t];
    const BatchSequence& seq = batch.sequences[static_cast<size_t>(batch.sequence_of[t])];
    const int32_t block = block_table_of(seq, kv)[pos / s.block_size];
    for (int64_t g = 0; g < s.n_kv_heads; ++g) {
      const int64_t row = cache.row_index(block, pos % s.block_size, g);
      const int64_t src = t * kvd + g * s.head_dim;
      const float* k_row = k + src;
      if (s.rotate_k) {
        std::copy_n(k_row, s.head_dim, rotated.data());
        kv_rotate(rotated.data(), s.head_dim);
        k_row = rotated.data();
      }
      if (s.k_channel_scales) {  // exact until the block is sealed (host_kv_storage.h)
        uint16_t* exact = cache.k_exact_row(layer, block, pos % s.block_size, g);
        cpu::store_kv(k_row, s.head_dim, DType::F16, exact);
      } else {
        cpu::store_kv(k_row, s.head_dim, s.k_dtype, cache.k_at(layer, row));
      }
      cpu::store_kv(v + src, s.head_dim, s.v_dtype, cache.v_at(layer, row));
    }
  }
}

void CpuBackend::store_kv(KvStorage& kv, int64_t layer, const float* k, const float* v,
                          const Batch& batch) {
  auto& cache = static_cast<HostKvStorage&>(kv);
  const bool channel = cache.shape().k_channel_scales;
  if (channel) cache.begin_k_writes(layer, batch);
  for_token_rows(batch.size(),
                 [&](int64_t b, int64_t e) { store_rows(kv, layer, k, v, batch, b, e); });
  if (channel) cache.seal_k_blocks(layer, batch);
}

void CpuBackend::rope_store_kv(KvStorage& kv, int64_t layer, float* q, float* k, const float* v,
                               int64_t n_heads, int64_t rope_dim, const float* inv_freq,
                               const Batch& batch) {
  auto& cache = static_cast<HostKvStorage&>(kv);
  const KvShape& s = kv.shape();
  const int64_t qd = n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
  if (s.k_channel_scales) cache.begin_k_writes(layer, batch);
  for_token_rows(batch.size(), [&](int64_t b, int64_t e) {
    const int32_t* positions = batch.positions.data() + b;
    cpu::rope(q + b * qd, e - b, n_heads, s.head_dim, rope_dim, positions, inv_freq);
    cpu::rope(k + b * kvd, e - b, s.n_kv_heads, s.head_dim, rope_dim, positions, inv_freq);
    store_rows(kv, layer, k, v, batch, b, e);
  });
  if (s.k_channel_scales) cache.seal_k_blocks(layer, batch);
}

void CpuBackend::attention(const KvStorage& kv, int64_t layer, const float* q, int64_t n_heads,
                           const AttentionScores& scores, const Batch& batch, float* out) {
  if (!time_ops_) return attention_untimed(kv, layer, q, n_heads, scores, batch, out);
  const auto start = std::chrono::steady_clock::now();
  attention_untimed(kv, layer, q, n_heads, scores, batch, out);
  op_times_.attention_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t head_dim = static_cast<const HostKvStorage&>(kv).shape().head_dim;
  for (int64_t t = 0; t < batch.size(); ++t) {  // q . k and p * v over the keys each token sees
    const int64_t ctx = batch.positions[static_cast<size_t>(t)] + 1;
    const int64_t keys = ctx - scores.first_key(ctx);
    op_times_.attention_flops += 4.0 * static_cast<double>(keys * head_dim * n_heads);
  }
}

std::vector<ComputePeak> CpuBackend::probe_compute() {
  return measure_compute_peaks(threads_);
}

void CpuBackend::silu_mul(const float* gate, const float* up, float* out, int64_t rows, int64_t n) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    cpu::silu_mul(gate + b * n, up + b * n, out + b * n, (e - b) * n);
  });
}

void CpuBackend::gelu_mul(const float* gate, const float* up, float* out, int64_t rows, int64_t n) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    cpu::gelu_mul(gate + b * n, up != nullptr ? up + b * n : nullptr, out + b * n, (e - b) * n);
  });
}

void CpuBackend::layernorm(const float* x, const float* weight, const float* bias, float* y,
                           int64_t rows, int64_t D, float eps) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    cpu::layernorm(x + b * D, weight, bias, y + b * D, e - b, D, eps);
  });
}

void CpuBackend::scale(float* x, float s, int64_t rows, int64_t n) {
  for_token_rows(rows, [&](int64_t b, int64_t e) {
    for (int64_t i = b * n; i < e * n; ++i) x[i] *= s;
  });
}

void CpuBackend::softcap(float* x, float cap, int64_t rows, int64_t n) {
  for_token_rows(rows, [&](int64_t b, int64_t e) { cpu::softcap(x + b * n, cap, (e - b) * n); });
}

void CpuBackend::add_position_embeddings(const WeightMatrix& table, const Batch& batch, float* x) {
  const int64_t D = table.n_cols;
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int32_t pos = batch.positions[static_cast<size_t>(t)];
    check_position(pos, table);
    dequantize_row(table, pos, row.data());
    add_inplace(x + t * D, row.data(), D);
  }
}

void CpuBackend::add(float* y, const float* x, int64_t rows, int64_t n) {
  for_token_rows(rows,
                 [&](int64_t b, int64_t e) { add_inplace(y + b * n, x + b * n, (e - b) * n); });
}

void CpuBackend::gather_rows(const float* x, int64_t D, std::span<const int32_t> rows, float* out) {
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(out + static_cast<int64_t>(r) * D, x + rows[r] * D,
                static_cast<size_t>(D) * sizeof(float));
  }
}

void CpuBackend::scatter_add_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                                  std::span<const float> scales, float* y) {
  for (size_t r = 0; r < rows.size(); ++r) {
    const float s = scales[r];
    const float* src = x + static_cast<int64_t>(r) * D;
    float* dst = y + rows[r] * D;
    for (int64_t i = 0; i < D; ++i) dst[i] += s * src[i];
  }
}

void CpuBackend::zero(float* x, int64_t rows, int64_t n) {
  std::memset(x, 0, static_cast<size_t>(rows * n) * sizeof(float));
}

}  // namespace ember::cpu
