// The CPU backend: today's kernels (AVX-512 / AVX2 / scalar, chosen once from CPUID) plus the CPU
// policy around them: how work splits over the thread pool (output rows for decode, 16-token groups
// for prefill, (query tile, kv head) items for attention), how quantized matrices are re-laid out
// for the decode kernels, and weights and KV cache in huge pages.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/core/aligned_vector.h"
#include "ember/core/huge_pages.h"
#include "ember/core/thread_pool.h"

namespace ember::cpu {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);

  BackendInfo info() const override;
  WeightMatrix upload_matrix(const WeightMatrix& host, bool host_is_file) override;
  const float* upload_vector(const float* host, int64_t n) override;
  bool owns_weight(const void* p) const override { return arena_.owns(p); }
  std::unique_ptr<KvStorage> allocate_kv(const KvShape& shape) override;
  std::span<const float> to_host(const float* data, int64_t n,
                                 std::vector<float>& staging) override;
  std::vector<ComputePeak> probe_compute() override;
  void set_op_timing(bool on) override { time_ops_ = on; }
  OpTimes op_times() const override { return op_times_; }

  void embed(const WeightMatrix& table, const Batch& batch, float* x) override;
  void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
               float eps) override;
  void matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
              std::span<float* const> ys) override;
  using Backend::matmul;
  void matmul_groups(std::span<const MatmulGroup> groups) override;
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
  // fn(t0, t1) over token rows [0, T): split across the threads when T is large enough for the
  // hand-off to pay (prefill), inline for a few tokens (decode). Row results never depend on it.
  template <typename Fn>
  void for_token_rows(int64_t T, Fn&& fn, int64_t grain = 4) {
    constexpr int64_t kMinParallelRows = 16;
    if (T < kMinParallelRows) {
      fn(int64_t{0}, T);
      return;
    }
    threads_.parallel_for(
        T, [&](int64_t b, int64_t e, int) { fn(b, e); }, grain);
  }
  // fn(b, e, thread) over [0, n) on the threads, or as one inline call when the whole job is
  // `work` < kMinParallelWork multiply-adds: a hand-off to the pool costs ~1.5 us, more than such a
  // job saves (stories260K decode, 2 threads, Zen 5: 14,600 tok/s through the pool, 32,500 on one
  // thread). Results never depend on it.
  static constexpr int64_t kMinParallelWork = int64_t{1} << 17;
  template <typename Fn>
  void parallel_for_work(int64_t work, int64_t n, Fn&& fn, int64_t grain = 1) {
    if (work < kMinParallelWork) {
      if (n > 0) fn(int64_t{0}, n, 0);
      return;
    }
    threads_.parallel_for(n, fn, grain);
  }
  // K and V rows of tokens [b, e) into their cache slots.
  void store_rows(KvStorage& kv, int64_t layer, const float* k, const float* v, const Batch& batch,
                  int64_t b, int64_t e);
  // Activations in the layouts the matrices' kernels read (prepared once per shared input).
  void prepare_inputs(const float* x, int64_t T, std::span<const WeightMatrix* const> ws);
  void matmul_token_groups(int64_t T, std::span<const WeightMatrix* const> ws,
                           std::span<float* const> ys);
  void matmul_output_rows(int64_t T, std::span<const WeightMatrix* const> ws,
                          std::span<float* const> ys, int64_t grain);

  void matmul_untimed(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys);
  // matmul_groups in one parallel region, where every group would split output rows on its own
  // with 8-bit activations; false (nothing done) otherwise.
  bool matmul_groups_one_region(std::span<const MatmulGroup> groups);
  void attention_untimed(const KvStorage& kv, int64_t layer, const float* q, int64_t n_heads,
                         const AttentionScores& scores, const Batch& batch, float* out);
  // attention_untimed's split of single tokens' long contexts into segments over the threads
  // (cpu_backend_attention.cpp); false (nothing done) when no token's keys span two segments.
  bool attention_by_segments(const KvStorage& kv, const PagedKv& view, const float* q,
                             int64_t n_heads, const AttentionScores& scores, const Batch& batch,
                             float* out);

  BackendOptions options_;
  ThreadPool threads_;
  bool time_ops_ = false;
  OpTimes op_times_;
  // Matrices copied at load (converted, interleaved, --no-mmap) and vectors: huge pages.
  HugePageArena arena_;
  // Attention work: (first token, token count) runs of consecutive tokens of one sequence.
  std::vector<std::pair<int64_t, int64_t>> attention_tiles_;
  // attention_by_segments: its work items (a tile's kv head, one segment or -1 for the whole
  // call; where its state goes in attention_partials_), the states, a head's folded total.
  struct SegmentItem {
    int64_t tile, kv_head, kv_head_end, segment, partial_at;
  };
  std::vector<SegmentItem> attention_items_;
  std::vector<float> attention_partials_, attention_total_;
  std::vector<float> q_rotated_;    // queries times H for a cache of rotated K (--kv-rotate)
  AlignedVector<BlockQ8Act> x_q8_;  // q8_0/q4_0 matmul input (see uses_8bit_activations)
  // matmul_groups_one_region: every group's quantized input, and each (group, matrix) piece of
  // the concatenated output rows.
  AlignedVector<BlockQ8Act> groups_q8_;
  struct GroupPiece {
    const BlockQ8Act* xq;
    int64_t rows;
    const WeightMatrix* w;
    float* y;
    int64_t first_row;  // of the concatenation
  };
  std::vector<GroupPiece> group_pieces_;
  AlignedVector<float> x_bf16_;   // bf16 matmul input in the kernels' layout
  AlignedVector<float> x_float_;  // f32/f16 (and q8_0/q4_0 GEMM) input in the kernels' layout
};

}  // namespace ember::cpu
