// The backend seam: everything that runs the model's arithmetic or owns its memory sits behind this
// interface, and model code (model/) is written once against it. A backend
//   - takes host weight views (mapped from a file or converted at load) and returns its own
//     weights (upload_matrix / upload_vector): layout and memory are its decision;
//   - allocates KV storage for a KV shape; the bytes and their layout are its own, the block
//     manager (kv/) only keeps books of block ids;
//   - runs the ops the model files call, on a Batch (backend/batch.h);
//   - describes itself (info()).
// Implementations: cpu/ (SIMD kernels chosen from CPUID, threads, huge pages, weight re-layout),
// reference/ (scalar, double accumulation: the oracle every backend is tested against) and cuda/
// (NVIDIA GPUs; compiled only with -DEMBER_CUDA=ON).
//
// Activation pointers passed to the ops point into Activations buffers of the same backend (host
// memory for cpu/reference, device memory for a GPU backend): model code does pointer arithmetic
// on them but never reads them; to_host() brings results back. Ops on one backend run one at a
// time, from one thread (the engine's).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ember/backend/attention_scores.h"
#include "ember/backend/batch.h"
#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/backend/weight.h"
#include "ember/core/dtype.h"

namespace ember::parallel {
class Communicator;
}

namespace ember {

struct BackendOptions {
  std::string name = "cpu";  // cpu | reference | cuda (built with -DEMBER_CUDA=ON)
  int device = 0;            // cuda: which GPU
  int n_threads = 0;         // cpu: 0 = physical cores; reference runs on one thread
  // cpu: q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs matrices are rewritten once into the
  // layout its decode kernels read fastest; false keeps the file's blocks (zero-copy when the file
  // holds the wanted dtype).
  bool interleave_quantized = true;
  // true (--no-mmap): matrices already in the compute dtype are copied into the backend's memory
  // instead of read in place from the file mapping.
  bool copy_weights = false;
};

struct BackendInfo {
  std::string name;     // "cpu", "reference", "cuda"
  std::string kernels;  // the kernel set in use: "avx512", "avx2", "scalar"; cuda: the GPU
  int threads = 1;
  int64_t weight_bytes_owned = 0;       // weights the backend copied into its own memory
  int64_t weight_bytes_huge_pages = 0;  // of those, bytes in 2 MiB pages
  // A device with memory of its own (cuda): its size and what is free now; 0 for host backends.
  int64_t device_memory_bytes = 0;
  int64_t device_memory_free_bytes = 0;
};

// One kernel family's measured peak: operations per second (a multiply and an add are 2, for
// integer families as for floats) on all of a backend's threads.
struct ComputePeak {
  std::string family;  // e.g. "amx-bf16", "avx512-vnni"
  double ops_per_second = 0;
  bool integer = false;
};

// What a backend's matmuls and attention cost while op timing was on (Backend::set_op_timing).
struct OpTimes {
  double matmul_seconds = 0, attention_seconds = 0;
  double matmul_flops = 0, attention_flops = 0;  // 2 * T * N * K; 4 * head_dim per (query, key)
};

// The KV cache's shape; how its bytes are laid out is the backend's business. K and V may be
// stored in different dtypes (kv_row_format.h: f32, f16, bf16, q8_0, q4_0).
struct KvShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType k_dtype = DType::F32;
  DType v_dtype = DType::F32;
  // K rows are stored rotated (kv_rotate(): H k) and attention rotates each query the same way;
  // for quantized K, where it lowers the error (--kv-rotate).
  bool rotate_k = false;
  // A q4_0 K cache stored per channel (kv_channel_blocks.h: a scale and minimum per channel and
  // block, sealed once the block is full; KIVI) instead of in q4_0's per-token groups.
  bool k_channel_scales = false;
  // The storage of a model's sliding-window layers kept apart from its global ones (Gemma 2/3,
  // backend/kv_cache.h): indexed by BatchSequence::window_block_table instead of block_table.
  bool window_table = false;

  void set_dtype(DType both) { k_dtype = v_dtype = both; }
  // Bytes of one token's K (V) row of one kv head, scales included.
  int64_t k_row_bytes() const {
    return k_channel_scales ? kv_channel_row_bytes(head_dim, block_size)
                            : kv_row_bytes(k_dtype, head_dim);
  }
  int64_t v_row_bytes() const { return kv_row_bytes(v_dtype, head_dim); }
  // K + V of one token across all layers, and of one block.
  int64_t bytes_per_token() const {
    return n_layers * n_kv_heads * (k_row_bytes() + v_row_bytes());
  }
  int64_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // Per-channel K: the exact rows (f16) of one block, every layer and kv head, which the storage
  // keeps beside the pool while the block is written (0 for other caches).
  int64_t k_exact_bytes_per_block() const {
    return k_channel_scales ? n_layers * n_kv_heads * block_size * head_dim * 2 : 0;
  }
  // "q8_0", or "q8_0/f16" when K and V differ; "q4_0c" names a K cache with per-channel scales.
  std::string dtype_label() const;
};

// A KV cache allocated by a backend: block ids from the block manager index it, one block id names
// the same token slots in every layer.
class KvStorage {
 public:
  explicit KvStorage(const KvShape& shape) : shape_(shape) {}
  virtual ~KvStorage() = default;
  const KvShape& shape() const { return shape_; }

  // One block's bytes, every layer's K then V rows (shape().bytes_per_block() in all), copied out
  // to host memory and back in: what the KV offload tiers (kv/kv_tier_store.h) keep of a block
  // that leaves the pool. The layout is the backend's own; a block written back by the same
  // backend with the same shape holds exactly what it held.
  virtual void read_block(int32_t block, uint8_t* out) const = 0;
  virtual void write_block(int32_t block, const uint8_t* in) = 0;
  // Bytes the storage holds beside its blocks (a per-channel K cache's exact rows of the blocks
  // being written, kv_channel_blocks.h); 0 for most.
  virtual int64_t side_bytes() const { return 0; }

 private:
  KvShape shape_;
};

// The block table through which `seq`'s tokens reach `kv` (KvShape::window_table).
inline const int32_t* block_table_of(const BatchSequence& seq, const KvStorage& kv) {
  return kv.shape().window_table ? seq.window_block_table : seq.block_table;
}

// A float buffer in a backend's memory (see the file comment).
class Activations {
 public:
  float* data() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  friend class Backend;
  std::shared_ptr<float> data_;
  int64_t size_ = 0;
};

// One matmul of matmul_groups: x [rows, K] by up to kMaxMatrices matrices sharing that input,
// into ys[i] [rows, ws[i]->n_rows].
struct MatmulGroup {
  static constexpr int kMaxMatrices = 3;
  const float* x = nullptr;
  int64_t rows = 0;
  int n_matrices = 0;
  const WeightMatrix* ws[kMaxMatrices] = {};
  float* ys[kMaxMatrices] = {};
  std::span<const WeightMatrix* const> matrices() const {
    return {ws, static_cast<size_t>(n_matrices)};
  }
  std::span<float* const> outputs() const { return {ys, static_cast<size_t>(n_matrices)}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendInfo info() const = 0;

  // --- memory ---
  // A weight matrix from a host view in the Rows layout. `host_is_file` says the view points into a
  // mapping that outlives the backend (then it may be used in place); otherwise it is temporary and
  // must be copied.
  virtual WeightMatrix upload_matrix(const WeightMatrix& host, bool host_is_file) = 0;
  // A float32 vector (norm weight, bias, RoPE frequencies) copied into backend memory.
  virtual const float* upload_vector(const float* host, int64_t n) = 0;
  // Whether `p` lies in memory this backend allocated for weights (not in a file mapping).
  virtual bool owns_weight(const void* p) const = 0;
  virtual std::unique_ptr<KvStorage> allocate_kv(const KvShape& shape) = 0;
  // Makes `buffer` hold at least `floats` floats (contents are not kept when it grows).
  void reserve(Activations& buffer, int64_t floats);
  // `n` floats of backend memory as host memory: the memory itself where the host can read it,
  // else a copy in `staging`.
  virtual std::span<const float> to_host(const float* data, int64_t n,
                                         std::vector<float>& staging) = 0;
  // GB/s of one kernel streaming `bytes` of this backend's own memory (the decode ceiling is bytes
  // per token over it) for backends whose memory is not host memory; 0 for host backends, whose
  // callers use core/bandwidth_probe.h.
  virtual double probe_read_bandwidth(int64_t bytes) { return 0.0; }
  // The compute ceilings next to it (ember bench --probe): each kernel family's measured peak on
  // all of the backend's threads; empty where a backend has no probe.
  virtual std::vector<ComputePeak> probe_compute() { return {}; }
  // While on, the backend adds the wall time and arithmetic of its matmul() and attention() calls
  // to op_times() (ember bench --probe: FLOP/s per op group). Off by default: it costs two clock
  // reads per call.
  virtual void set_op_timing(bool on) {}
  virtual OpTimes op_times() const { return {}; }
  // The other way: `n` host floats into backend memory at `data` (tests, hooks that inject
  // activations). The default is a memcpy, right for backends whose memory is host memory.
  virtual void from_host(float* data, const float* host, int64_t n);

  // --- ops; "rows" is a token count, T = batch.size() ---
  // x[t] = table[batch.tokens[t]] as float32: x [T, table.n_cols].
  virtual void embed(const WeightMatrix& table, const Batch& batch, float* x) = 0;
  // y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight; x/y [rows, D] (may alias).
  virtual void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
                       float eps) = 0;
  // ys[i][t, n] = sum_k x[t, k] * ws[i][n, k] for matrices sharing one input x [rows, K]
  // (e.g. Q/K/V): a backend may prepare x once for all of them.
  virtual void matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys) = 0;
  void matmul(const float* x, int64_t rows, std::initializer_list<const WeightMatrix*> ws,
              std::initializer_list<float*> ys);
  // Independent matmuls, each with its own input (a mixture layer's active experts, each on the
  // tokens routed to it): the results of one matmul() per group, bit for bit. A backend may run
  // them together (the cpu backend: one parallel region over every group's output rows, so the
  // threads split across experts and rows and wake once per layer, not once per expert); the
  // default calls matmul() group by group.
  virtual void matmul_groups(std::span<const MatmulGroup> groups);
  // y[t] += bias for every row; y [rows, n].
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t n) = 0;
  // Rotary embedding at each token's position (batch.positions), HF half-rotation layout (element
  // i pairs with i + rope_dim / 2 within a head): x [T, n_heads, head_dim] in place.
  virtual void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                    const float* inv_freq, const Batch& batch) = 0;
  // Writes every token's K and V rows ([T, n_kv_heads * head_dim] each) into its cache slot
  // (block_table[pos / block_size], slot pos % block_size) of `layer`.
  virtual void store_kv(KvStorage& kv, int64_t layer, const float* k, const float* v,
                        const Batch& batch) = 0;
  // rope() on Q (n_heads) and K (the cache's n_kv_heads), then store_kv(): one op so that a
  // backend can run it as one pass over the tokens (the cpu backend: one parallel region).
  virtual void rope_store_kv(KvStorage& kv, int64_t layer, float* q, float* k, const float* v,
                             int64_t n_heads, int64_t rope_dim, const float* inv_freq,
                             const Batch& batch) = 0;
  // Causal attention of each token over its sequence's positions [0, position] of `layer` (or the
  // last scores.window of them), read through the block tables: q/out [T, n_heads * head_dim].
  // GQA: query head h reads kv head h / (n_heads / n_kv_heads). Scores: attention_scores.h.
  virtual void attention(const KvStorage& kv, int64_t layer, const float* q, int64_t n_heads,
                         const AttentionScores& scores, const Batch& batch, float* out) = 0;
  // out = silu(gate) * up, [rows, n].
  virtual void silu_mul(const float* gate, const float* up, float* out, int64_t rows,
                        int64_t n) = 0;
  // out = gelu(gate) * up (GeGLU), or gelu(gate) alone when up is null; GELU's tanh form
  // 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) as GPT-2 and Gemma use it. [rows, n].
  virtual void gelu_mul(const float* gate, const float* up, float* out, int64_t rows,
                        int64_t n) = 0;
  // y[t] = (x[t] - mean) / sqrt(var + eps) * weight + bias (LayerNorm, GPT-2); x/y [rows, D]
  // (may alias).
  virtual void layernorm(const float* x, const float* weight, const float* bias, float* y,
                         int64_t rows, int64_t D, float eps) = 0;
  // x *= s, [rows, n] (Gemma's sqrt(d_model) embedding scale).
  virtual void scale(float* x, float s, int64_t rows, int64_t n) = 0;
  // x = cap * tanh(x / cap), [rows, n] (Gemma 2's final logit soft-cap).
  virtual void softcap(float* x, float cap, int64_t rows, int64_t n) = 0;
  // x[t] += table[batch.positions[t]] (GPT-2's learned position embeddings): x [T, table.n_cols].
  // Throws ember::Error for a position past the table.
  virtual void add_position_embeddings(const WeightMatrix& table, const Batch& batch, float* x) = 0;
  // y += x (the residual add), [rows, n].
  virtual void add(float* y, const float* x, int64_t rows, int64_t n) = 0;
  // out[r] = x[rows[r]]: x [*, D] -> out [rows.size(), D] (the rows whose logits are wanted; the
  // tokens routed to one expert).
  virtual void gather_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                           float* out) = 0;
  // y[rows[r]] += scales[r] * x[r] in order of r: x [rows.size(), D] -> y [*, D] (an expert's
  // outputs added into its tokens' rows with their router weights; a row may repeat).
  virtual void scatter_add_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                                std::span<const float> scales, float* y) = 0;
  // x = 0, [rows, n].
  virtual void zero(float* x, int64_t rows, int64_t n) = 0;
  // x [n floats, this backend's memory] becomes the sum of every rank's x over `ranks` (tensor
  // parallelism's partial sums; every rank calls it in the same order). The default hands host
  // memory to the communicator (MPI); cuda adds device memory with NCCL, in order with its other
  // launches.
  virtual void all_reduce_sum(float* x, int64_t n, parallel::Communicator& ranks);

 protected:
  // The checks embed / add_position_embeddings make in every backend: an ember::Error naming the
  // token id or position outside `table`'s rows.
  static void check_token(int32_t token, const WeightMatrix& table);
  static void check_position(int32_t position, const WeightMatrix& table);
  // Backends allocate activation buffers in their own memory.
  virtual std::shared_ptr<float> allocate_activations(int64_t floats) = 0;
};

// "cpu", "reference" or "cuda"; throws ember::Error naming the choices for anything else, and for
// "cuda" in a build without it or on a machine without a GPU.
std::shared_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace ember
