// The reference backend: every op on the scalar reference kernels (reference_kernels.h, double
// accumulation), one thread, weights in the file's Rows layout. Slow by design: it is the second
// complete implementation of the seam and the oracle the cpu backend is checked against end to end
// (same model, same batch, logits compared).
#pragma once

#include <memory>
#include <vector>

#include "ember/backend/backend.h"

namespace ember::reference {

class ReferenceBackend : public Backend {
 public:
  explicit ReferenceBackend(const BackendOptions& options);

  BackendInfo info() const override;
  WeightMatrix upload_matrix(const WeightMatrix& host, bool host_is_file) override;
  const float* upload_vector(const float* host, int64_t n) override;
  bool owns_weight(const void* p) const override;
  std::unique_ptr<KvStorage> allocate_kv(const KvShape& shape) override;
  std::span<const float> to_host(const float* data, int64_t n,
                                 std::vector<float>& staging) override;

  void embed(const WeightMatrix& table, const Batch& batch, float* x) override;
  void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
               float eps) override;
  void matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
              std::span<float* const> ys) override;
  using Backend::matmul;
  void add_bias(float* y, const float* bias, int64_t rows, int64_t n) override;
  void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim, const float* inv_freq,
            const Batch& batch) override;
  void store_kv(KvStorage& kv, int64_t layer, const float* k, const float* v,
                const Batch& batch) override;
  void rope_store_kv(KvStorage& kv, int64_t layer, float* q, float* k, const float* v,
                     int64_t n_heads, int64_t rope_dim, const float* inv_freq,
                     const Batch& batch) override;
  void attention(const KvStorage& kv, int64_t layer, const float* q, int64_t n_heads,
                 const AttentionScores& scores, const Batch& batch, float* out) override;
  void silu_mul(const float* gate, const float* up, float* out, int64_t rows, int64_t n) override;
  void gelu_mul(const float* gate, const float* up, float* out, int64_t rows, int64_t n) override;
  void layernorm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                 int64_t D, float eps) override;
  void scale(float* x, float s, int64_t rows, int64_t n) override;
  void softcap(float* x, float cap, int64_t rows, int64_t n) override;
  void add_position_embeddings(const WeightMatrix& table, const Batch& batch, float* x) override;
  void add(float* y, const float* x, int64_t rows, int64_t n) override;
  void gather_rows(const float* x, int64_t D, std::span<const int32_t> rows, float* out) override;
  void scatter_add_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                        std::span<const float> scales, float* y) override;
  void zero(float* x, int64_t rows, int64_t n) override;

 protected:
  std::shared_ptr<float> allocate_activations(int64_t floats) override;

 private:
  // Every weight and vector copied at load, so the backend owns all its memory.
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
  std::vector<std::pair<const uint8_t*, size_t>> ranges_;
  uint8_t* allocate(size_t bytes);
};

}  // namespace ember::reference
