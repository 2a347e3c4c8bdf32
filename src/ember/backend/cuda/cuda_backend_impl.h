// The CUDA backend (see backend/backend.h for the contract). Weights, KV blocks and activations
// live in device memory; every op's launches are queued (step_graphs.h) and run on one stream when
// the step's logits are read (to_host), as a replayed graph where the step repeats. Matrices:
// f32/f16/bf16 as stored; q8_0/q4_0 re-laid out at upload into QuantsThenScales (16-byte-aligned
// quants, scales apart) for the decode matvec kernels; the other GGML block types as stored,
// decoded in-kernel (block_dequant.cuh); anything else (none today) would be expanded to bf16 at
// upload, said once on stderr. Up to kMatvecMaxTokens tokens use our matvec kernels; larger steps
// (prefill, batched decode) use cuBLAS on bf16/f16 operands (f32 weights: SGEMM in f32).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/backend/cuda/device_batch.h"
#include "ember/backend/cuda/kernels.h"
#include "ember/backend/cuda/nccl_group.h"
#include "ember/backend/cuda/step_graphs.h"

namespace ember::cuda {

// Owns device memory; frees it on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaKvStorage : public KvStorage {
 public:
  explicit CudaKvStorage(const KvShape& shape);
  DeviceKvLayer layer(int64_t layer) const;
  void read_block(int32_t block, uint8_t* out) const override;
  void write_block(int32_t block, const uint8_t* in) override;

 private:
  DeviceBuffer keys_;
  DeviceBuffer values_;
};

// Op ids in launch signatures (step_graphs.h).
enum LaunchOp : int {
  kEmbed = 1,
  kPositions,
  kRmsNorm,
  kLayerNorm,
  kAddBias,
  kRope,
  kStoreKv,
  kRopeStoreKv,
  kAttention,
  kAttentionTiles,
  kSiluMul,
  kGeluMul,
  kScale,
  kSoftcap,
  kAdd,
  kGatherRows,
  kMatvec,
  kScatterAdd,
  kZero,
  kAllReduce,
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options);
  ~CudaBackend() override;

  BackendInfo info() const override;
  WeightMatrix upload_matrix(const WeightMatrix& host, bool host_is_file) override;
  const float* upload_vector(const float* host, int64_t n) override;
  bool owns_weight(const void* p) const override;
  std::unique_ptr<KvStorage> allocate_kv(const KvShape& shape) override;
  std::span<const float> to_host(const float* data, int64_t n,
                                 std::vector<float>& staging) override;
  void from_host(float* data, const float* host, int64_t n) override;
  double probe_read_bandwidth(int64_t bytes) override;

  void embed(const WeightMatrix& table, const Batch& batch, float* x) override;
  void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
               float eps) override;
  void matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
              std::span<float* const> ys) override;
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
  void all_reduce_sum(float* x, int64_t n, parallel::Communicator& ranks) override;

 protected:
  std::shared_ptr<float> allocate_activations(int64_t floats) override;

 private:
  // Makes this thread's current device ours (ops may come from another thread than the loader's).
  void bind() const;
  void* allocate_weight(size_t bytes);
  // cuBLAS y [T, N] = x [T, K] . W^T for one matrix (T > kMatvecMaxTokens); xh: x in the
  // matrix's 16-bit type (null for f32 weights).
  void gemm(const float* x, const uint16_t* xh, int64_t T, const WeightMatrix& w, float* y);
  uint16_t* scratch_halves(std::vector<DeviceBuffer>& slot, int64_t n);
  // Split-K attention's partial results, at least `floats` of them (grown between steps only:
  // pending launches are run first).
  float* attention_scratch(int64_t floats);
  // Every kernel launch of an op goes through defer(): it runs at the next flush (to_host, an
  // eager op, a changed upload), directly or as part of a replayed graph (step_graphs.h). `op`
  // and `args` are the launch's signature: everything the launch closure captured.
  template <typename Fn, typename... Args>
  void defer(int op, Fn&& launch, const Args&... args) {
    signature_.add(op);
    signature_.add_all(args...);
    pending_.emplace_back(std::forward<Fn>(launch));
    pending_ops_.push_back(op);
  }
  // EMBER_CUDA_PROFILE=1: every launch runs alone between two events; the GPU time per op is
  // printed when the backend goes away (where a step's time goes; slows the run down).
  void run_profiled(const std::vector<std::function<void()>>& launches,
                    const std::vector<int>& ops);
  void print_profile() const;
  // A decode-sized matmul waiting in the queue, kept so that a residual add right after it can be
  // folded into it (fuse_residual_add: one launch fewer per add; EMBER_CUDA_FUSE=0 turns it off).
  struct PendingMatvec {
    const float* x = nullptr;
    int64_t rows = 0;
    std::vector<WeightMatrix> matrices;
    std::vector<float*> outputs;
    float* residual = nullptr;
    bool folds_norm = false;  // x is the input of an RMSNorm the kernel applies (fold_norm)
    FoldedNorm norm;
    size_t signature_start = 0;
  };
  void defer_matvec(PendingMatvec mv);
  // An RMSNorm waiting in the queue, kept so that the matvec reading its output can apply it
  // itself (fold_norm: one launch fewer per norm in a decode step; EMBER_CUDA_FUSE=0 turns it
  // off with the residual-add fusion). The norm's output is still written, by the matvec.
  struct PendingNorm {
    const float* x = nullptr;
    const float* weight = nullptr;
    float* y = nullptr;
    int64_t rows = 0, D = 0;
    float eps = 0.0f;
    size_t signature_start = 0;
  };
  void fold_norm(PendingMatvec& mv, std::span<const WeightMatrix* const> ws);
  bool fuse_residual_add(float* y, const float* x, int64_t count);
  // Runs the pending launches; graph_ok false: directly, and the rest of the step too.
  void flush(bool graph_ok);
  void before_upload_change(DeviceInts* ints);

  int device_ = 0;
  std::string device_name_;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  static constexpr size_t kCublasWorkspaceBytes = size_t{64} << 20;
  DeviceBuffer cublas_workspace_;
  std::vector<DeviceBuffer> weights_;
  int64_t weight_bytes_ = 0;
  BatchUploader batch_;
  DeviceInts gather_rows_;
  DeviceInts scatter_ints_;  // scatter_add_rows: its rows, then its scales' bits
  std::vector<int32_t> scatter_packed_;
  std::vector<int32_t> attention_tiles_, attention_singles_;  // host lists, rebuilt per call
  DeviceInts attention_tile_ints_, attention_single_ints_;
  std::vector<DeviceBuffer> x_half_;     // activations converted for cuBLAS (bf16)
  std::vector<DeviceBuffer> x_f16_;      // (f16, for f16 weights)
  std::vector<DeviceBuffer> w_dequant_;  // a quantized matrix expanded to bf16 for cuBLAS
  bool warned_expanded_ = false;
  Signature signature_;
  std::vector<std::function<void()>> pending_;
  std::vector<int> pending_ops_;
  bool profile_ = false;
  std::vector<double> profile_ms_;  // per op id
  std::vector<int64_t> profile_count_;
  int64_t gemm_count_ = 0;
  double gemm_ms_ = 0;
  double gemm_flops_ = 0;
  bool step_graph_ok_ = true;
  PendingMatvec last_matvec_;
  size_t last_matvec_index_ = SIZE_MAX;
  PendingNorm last_norm_;
  size_t last_norm_index_ = SIZE_MAX;
  bool fuse_adds_ = true;
  bool split_k_ = true;  // EMBER_CUDA_SPLIT_K=0: decode attention in one block per (token, head)
  // EMBER_CUDA_GQA_BLOCKS=0: a decode attention block per query head even where one block could
  // serve a GQA group (attention_block_heads).
  bool group_heads_ = true;
  // EMBER_CUDA_ATTENTION_TILES=0: prefill chunks take the per-token kernel (f32 arithmetic) instead
  // of the tensor-core tiles (f16 Q, K, P, V): to tell their rounding from a bug.
  bool use_attention_tiles_ = true;
  DeviceBuffer attention_partial_;
  // --tp: the tensor-parallel ranks as an NCCL communicator, joined at the first all_reduce_sum
  // (nccl_group.h); nccl_ranks_ is the host communicator it was made from.
  std::unique_ptr<NcclGroup> nccl_;
  const parallel::Communicator* nccl_ranks_ = nullptr;
  StepGraphs graphs_;
};

}  // namespace ember::cuda
