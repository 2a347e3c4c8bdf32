#include "ember/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ember/backend/cuda/cuda_backend_impl.h"
#include "ember/backend/cuda/cuda_check.h"
#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/parallel/communicator.h"

namespace ember::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

CudaKvStorage::CudaKvStorage(const KvShape& shape) : KvStorage(shape) {
  // The device kernels read f32 or f16 rows; bf16/q8_0/q4_0 caches run on the cpu backend.
  const bool same = shape.k_dtype == shape.v_dtype;
  if (!same || shape.rotate_k || (shape.k_dtype != DType::F32 && shape.k_dtype != DType::F16)) {
    throw Error(ErrorKind::Unsupported, "cuda: KV cache " + shape.dtype_label() +
                                            (shape.rotate_k ? " with --kv-rotate" : "") +
                                            " (the cuda backend stores f32 or f16 K and V; "
                                            "bf16, q8_0, q4_0 and --kv-rotate caches run on "
                                            "--backend cpu)");
  }
  const auto bytes =
      static_cast<size_t>(shape.bytes_per_token() / 2 * shape.n_blocks * shape.block_size);
  keys_ = DeviceBuffer(bytes);
  values_ = DeviceBuffer(bytes);
  // Unwritten slots are never read, but zeros keep a stray read finite.
  check(cudaMemset(keys_.get(), 0, bytes), "cudaMemset");
  check(cudaMemset(values_.get(), 0, bytes), "cudaMemset");
}

// The device layout is the host one ([block, kv head, slot] rows per layer): a block is one
// contiguous run per layer in K and in V. Copies are synchronous (the engine's offload path).
void CudaKvStorage::read_block(int32_t block, uint8_t* out) const {
  const KvShape& s = shape();
  const auto bytes = static_cast<size_t>(s.n_kv_heads * s.block_size * s.k_row_bytes());
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const DeviceKvLayer dl = layer(l);
    check(cudaMemcpy(out, static_cast<const uint8_t*>(dl.k) + block * bytes, bytes,
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    out += bytes;
    check(cudaMemcpy(out, static_cast<const uint8_t*>(dl.v) + block * bytes, bytes,
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    out += bytes;
  }
}

void CudaKvStorage::write_block(int32_t block, const uint8_t* in) {
  const KvShape& s = shape();
  const auto bytes = static_cast<size_t>(s.n_kv_heads * s.block_size * s.k_row_bytes());
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const DeviceKvLayer dl = layer(l);
    check(
        cudaMemcpy(static_cast<uint8_t*>(dl.k) + block * bytes, in, bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy");
    in += bytes;
    check(
        cudaMemcpy(static_cast<uint8_t*>(dl.v) + block * bytes, in, bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy");
    in += bytes;
  }
}

DeviceKvLayer CudaKvStorage::layer(int64_t layer) const {
  const KvShape& s = shape();
  const int64_t layer_bytes = s.n_blocks * s.block_size * s.n_kv_heads * s.k_row_bytes();
  DeviceKvLayer l;
  l.k = static_cast<uint8_t*>(keys_.get()) + layer * layer_bytes;
  l.v = static_cast<uint8_t*>(values_.get()) + layer * layer_bytes;
  l.f16 = s.k_dtype == DType::F16;
  l.n_kv_heads = static_cast<int32_t>(s.n_kv_heads);
  l.head_dim = static_cast<int32_t>(s.head_dim);
  l.block_size = static_cast<int32_t>(s.block_size);
  return l;
}

// EMBER_CUDA_GRAPHS=0 turns step graphs off (every launch direct), to compare or to debug.
bool graphs_enabled() {
  const char* env = std::getenv("EMBER_CUDA_GRAPHS");
  return env == nullptr || std::string(env) != "0";
}

CudaBackend::CudaBackend(const BackendOptions& options)
    : device_(options.device), graphs_(graphs_enabled()) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) throw Error(ErrorKind::Unavailable, "--backend cuda: no CUDA device (" + why + ")");
  if (device_ < 0 || device_ >= n) {
    throw Error::invalid_request("--device", "--device " + std::to_string(device_) +
                                                 ": this machine has " + std::to_string(n) +
                                                 " CUDA device(s), numbered from 0");
  }
  check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  device_name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                 std::to_string(prop.minor) + ")";
  sm_count_ = prop.multiProcessorCount;
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  const char* fuse = std::getenv("EMBER_CUDA_FUSE");
  fuse_adds_ = fuse == nullptr || std::string(fuse) != "0";
  const char* tiles = std::getenv("EMBER_CUDA_ATTENTION_TILES");
  use_attention_tiles_ = tiles == nullptr || std::string(tiles) != "0";
  const char* group_heads = std::getenv("EMBER_CUDA_GQA_BLOCKS");
  group_heads_ = group_heads == nullptr || std::string(group_heads) != "0";
  const char* split_k = std::getenv("EMBER_CUDA_SPLIT_K");
  split_k_ = split_k == nullptr || std::string(split_k) != "0";
  const char* profile = std::getenv("EMBER_CUDA_PROFILE");
  profile_ = profile != nullptr && std::string(profile) == "1";
  auto on_change = [this](DeviceInts* ints) { before_upload_change(ints); };
  batch_.set_on_change(on_change);
  for (DeviceInts* d :
       {&gather_rows_, &scatter_ints_, &attention_tile_ints_, &attention_single_ints_}) {
    d->on_change = on_change;
  }
  check(cublasCreate(&cublas_), "cublasCreate");
  check(cublasSetStream(cublas_, stream_), "cublasSetStream");
  // A workspace of its own: Hopper's fastest GEMM kernels want more than cuBLAS's default, and a
  // fixed one keeps cuBLAS from allocating during a step.
  cublas_workspace_ = DeviceBuffer(kCublasWorkspaceBytes);
  check(cublasSetWorkspace(cublas_, cublas_workspace_.get(), kCublasWorkspaceBytes),
        "cublasSetWorkspace");
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (profile_ || std::getenv("EMBER_CUDA_GRAPH_STATS") != nullptr) print_profile();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::bind() const {
  if (device_ != 0) check(cudaSetDevice(device_), "cudaSetDevice");
}

BackendInfo CudaBackend::info() const {
  BackendInfo i;
  i.name = "cuda";
  i.kernels = device_name_;
  i.threads = 1;
  i.weight_bytes_owned = weight_bytes_;
  bind();
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    i.device_memory_bytes = static_cast<int64_t>(total_bytes);
    i.device_memory_free_bytes = static_cast<int64_t>(free_bytes);
  }
  return i;
}

void* CudaBackend::allocate_weight(size_t bytes) {
  bind();
  weights_.emplace_back(bytes);
  weight_bytes_ += static_cast<int64_t>(bytes);
  return weights_.back().get();
}

bool CudaBackend::owns_weight(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const auto& w : weights_) {
    const auto* start = static_cast<const uint8_t*>(w.get());
    if (b >= start && b < start + w.bytes()) return true;
  }
  return false;
}

WeightMatrix CudaBackend::upload_matrix(const WeightMatrix& host, bool) {
  if (host.layout != WeightLayout::Rows) throw Error("cuda: upload_matrix expects the Rows layout");
  WeightMatrix out = host;
  const auto* src = static_cast<const uint8_t*>(host.data);
  const int64_t N = host.n_rows, K = host.n_cols;
  std::vector<uint8_t> staged;
  switch (host.dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      break;
    case DType::Q8_0:
    case DType::Q4_0: {
      // QuantsThenScales: each block's quants to the row's quant run, its scale to the scale array.
      const bool q8 = host.dtype == DType::Q8_0;
      const int64_t blocks = K / kQuantBlock, qbytes = q8 ? 32 : 16;
      staged.resize(static_cast<size_t>(host.bytes()));
      uint8_t* quants = staged.data();
      auto* scales = reinterpret_cast<uint16_t*>(staged.data() + N * blocks * qbytes);
      for (int64_t r = 0; r < N; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
          const uint8_t* block = src + r * host.row_bytes + b * (qbytes + 2);
          std::memcpy(&scales[r * blocks + b], block, 2);
          std::memcpy(quants + (r * blocks + b) * qbytes, block + 2, static_cast<size_t>(qbytes));
        }
      }
      out.layout = WeightLayout::QuantsThenScales;
      src = staged.data();
      break;
    }
    default: {
      if (is_group_dtype(host.dtype)) break;  // as stored: decoded in-kernel (block_dequant.cuh)
      // No kernel for this block type: expand to bf16 once (exact for the block's values up to
      // bf16 rounding), and say so.
      if (!warned_expanded_) {
        std::fprintf(stderr,
                     "cuda: %s weights have no CUDA kernel yet; expanded to bf16 at load (more "
                     "memory than the file)\n",
                     dtype_name(host.dtype));
        warned_expanded_ = true;
      }
      out.dtype = DType::BF16;
      out.row_bytes = dtype_row_bytes(DType::BF16, K);
      staged.resize(static_cast<size_t>(out.bytes()));
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t r = 0; r < N; ++r) {
        dequantize_row(host.dtype, src + r * host.row_bytes, row.data(), K);
        auto* dst = reinterpret_cast<uint16_t*>(staged.data() + r * out.row_bytes);
        for (int64_t c = 0; c < K; ++c) dst[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
      }
      src = staged.data();
      break;
    }
  }
  void* dst = allocate_weight(static_cast<size_t>(out.bytes()));
  check(cudaMemcpy(dst, src, static_cast<size_t>(out.bytes()), cudaMemcpyHostToDevice),
        "weight upload");
  out.data = dst;
  return out;
}

const float* CudaBackend::upload_vector(const float* host, int64_t n) {
  void* dst = allocate_weight(static_cast<size_t>(n) * sizeof(float));
  check(cudaMemcpy(dst, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice),
        "vector upload");
  return static_cast<const float*>(dst);
}

std::unique_ptr<KvStorage> CudaBackend::allocate_kv(const KvShape& shape) {
  bind();
  return std::make_unique<CudaKvStorage>(shape);
}

std::shared_ptr<float> CudaBackend::allocate_activations(int64_t floats) {
  bind();
  float* p = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&p), static_cast<size_t>(floats) * sizeof(float)),
        "activation buffer");
  return std::shared_ptr<float>(p, [](float* q) { cudaFree(q); });
}

void CudaBackend::flush(bool graph_ok) {
  if (!pending_.empty()) {
    step_graph_ok_ = step_graph_ok_ && graph_ok;
    // The pending launches are cleared even when one throws: they belong to a step that failed.
    std::vector<std::function<void()>> launches;
    launches.swap(pending_);
    last_matvec_index_ = SIZE_MAX;
    last_norm_index_ = SIZE_MAX;
    std::vector<int> ops;
    ops.swap(pending_ops_);
    Signature signature = signature_;
    signature_.clear();
    if (profile_) {
      run_profiled(launches, ops);
    } else {
      graphs_.run(stream_, launches, signature, step_graph_ok_);
    }
  } else {
    step_graph_ok_ = step_graph_ok_ && graph_ok;
  }
  batch_.clear_used();
  for (DeviceInts* d :
       {&gather_rows_, &scatter_ints_, &attention_tile_ints_, &attention_single_ints_}) {
    d->used = false;
  }
}

const char* const kOpNames[] = {
    "?",        "embed",      "positions",   "rmsnorm",    "layernorm",   "add_bias", "rope",
    "store_kv", "rope_store", "attention",   "attn_tiles", "silu_mul",    "gelu_mul", "scale",
    "softcap",  "add",        "gather_rows", "matvec",     "scatter_add", "zero",     "all_reduce"};

void CudaBackend::run_profiled(const std::vector<std::function<void()>>& launches,
                               const std::vector<int>& ops) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (size_t i = 0; i < launches.size(); ++i) {
    check(cudaEventRecord(start, stream_), "event");
    launches[i]();
    check(cudaEventRecord(stop, stream_), "event");
    check(cudaEventSynchronize(stop), "profile");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const auto op = static_cast<size_t>(ops[i]);
    if (profile_ms_.size() <= op) {
      profile_ms_.resize(op + 1);
      profile_count_.resize(op + 1);
    }
    profile_ms_[op] += ms;
    ++profile_count_[op];
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void CudaBackend::print_profile() const {
  double total = gemm_ms_;
  for (double ms : profile_ms_) total += ms;
  std::fprintf(stderr, "cuda profile (GPU ms per op, each launch timed alone):\n");
  std::fprintf(stderr, "  %-12s %8lld launches %10.2f ms %5.1f%% (%.0f TFLOP/s with conversions)\n",
               "gemm (cuBLAS)", static_cast<long long>(gemm_count_), gemm_ms_,
               100 * gemm_ms_ / total, gemm_ms_ > 0 ? gemm_flops_ / (gemm_ms_ * 1e9) : 0.0);
  for (size_t op = 0; op < profile_ms_.size(); ++op) {
    if (profile_count_[op] == 0) continue;
    std::fprintf(stderr, "  %-12s %8lld launches %10.2f ms %5.1f%%\n",
                 op < std::size(kOpNames) ? kOpNames[op] : "?",
                 static_cast<long long>(profile_count_[op]), profile_ms_[op],
                 100 * profile_ms_[op] / total);
  }
  std::fprintf(stderr, "  graphs: %lld captured, %lld replayed\n",
               static_cast<long long>(graphs_.captures()),
               static_cast<long long>(graphs_.replays()));
}

void CudaBackend::before_upload_change(DeviceInts* ints) {
  if (ints->used && !pending_.empty()) flush(false);
}

std::span<const float> CudaBackend::to_host(const float* data, int64_t n,
                                            std::vector<float>& staging) {
  bind();
  flush(true);
  step_graph_ok_ = true;  // the step ends here
  staging.resize(static_cast<size_t>(n));
  check(cudaMemcpyAsync(staging.data(), data, static_cast<size_t>(n) * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "copy to host");
  check(cudaStreamSynchronize(stream_), "step");
  return {staging.data(), staging.size()};
}

void CudaBackend::from_host(float* data, const float* host, int64_t n) {
  bind();
  flush(false);
  check(cudaMemcpyAsync(data, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice,
                        stream_),
        "copy from host");
  check(cudaStreamSynchronize(stream_), "copy from host");
}

double CudaBackend::probe_read_bandwidth(int64_t bytes) {
  bind();
  flush(false);
  bytes = std::max<int64_t>(bytes / 16 * 16, 16);
  DeviceBuffer buffer(static_cast<size_t>(bytes) + 16);
  // Written once so that the pages are real (and the data is not all zeros).
  check(cudaMemsetAsync(buffer.get(), 0x5a, static_cast<size_t>(bytes) + 16, stream_), "memset");
  auto* sink = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(buffer.get()) + bytes);
  // The best of three passes. The figure depends on the data read: on an H200 this kernel gave
  // 3.9-4.0 TB/s over these 0x5a bytes (1 to 16 GiB alike), 4.5-4.6 over 0x01 bytes, and the
  // output head's matvec reads random bf16 weights at 4.33 TB/s (README, CUDA).
  float ms = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const float t = time_read_probe(buffer.get(), bytes, sink, sm_count_, stream_);
    ms = pass == 0 ? t : std::min(ms, t);
  }
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0.0;
}

void CudaBackend::embed(const WeightMatrix& table, const Batch& batch, float* x) {
  bind();
  for (const int32_t token : batch.tokens) check_token(token, table);
  const DeviceTokens b = batch_.tokens(batch, stream_);
  defer(
      kEmbed, [=, this] { launch_embed(table, b, x, stream_); }, table, b, x);
}

void CudaBackend::add_position_embeddings(const WeightMatrix& table, const Batch& batch, float* x) {
  bind();
  for (const int32_t pos : batch.positions) check_position(pos, table);
  const DeviceTokens b = batch_.tokens(batch, stream_);
  defer(
      kPositions, [=, this] { launch_add_position_embeddings(table, b, x, stream_); }, table, b, x);
}

void CudaBackend::rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t D,
                          float eps) {
  bind();
  const size_t signature_start = signature_.bytes().size();
  defer(
      kRmsNorm, [=, this] { launch_rmsnorm(x, weight, y, rows, D, eps, stream_); }, x, weight, y,
      rows, D, eps);
  last_norm_ = {x, weight, y, rows, D, eps, signature_start};
  last_norm_index_ = pending_.size() - 1;
}

void CudaBackend::layernorm(const float* x, const float* weight, const float* bias, float* y,
                            int64_t rows, int64_t D, float eps) {
  bind();
  defer(
      kLayerNorm, [=, this] { launch_layernorm(x, weight, bias, y, rows, D, eps, stream_); }, x,
      weight, bias, y, rows, D, eps);
}

void CudaBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  bind();
  defer(
      kAddBias, [=, this] { launch_add_bias(y, bias, rows, n, stream_); }, y, bias, rows, n);
}

void CudaBackend::rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                       const float* inv_freq, const Batch& batch) {
  bind();
  const DeviceTokens b = batch_.tokens(batch, stream_);
  defer(
      kRope, [=, this] { launch_rope(x, n_heads, head_dim, rope_dim, inv_freq, b, stream_); }, x,
      n_heads, head_dim, rope_dim, inv_freq, b);
}

void CudaBackend::store_kv(KvStorage& kv, int64_t layer, const float* k, const float* v,
                           const Batch& batch) {
  bind();
  const DeviceKvLayer l = static_cast<const CudaKvStorage&>(kv).layer(layer);
  const DeviceTokens b = batch_.tokens(batch, stream_);
  const DeviceTables t =
      batch_.tables(batch, kv.shape().block_size, kv.shape().window_table, stream_);
  defer(
      kStoreKv, [=, this] { launch_store_kv(l, k, v, b, t, stream_); }, l, k, v, b, t);
}

void CudaBackend::rope_store_kv(KvStorage& kv, int64_t layer, float* q, float* k, const float* v,
                                int64_t n_heads, int64_t rope_dim, const float* inv_freq,
                                const Batch& batch) {
  bind();
  const DeviceKvLayer l = static_cast<const CudaKvStorage&>(kv).layer(layer);
  const DeviceTokens b = batch_.tokens(batch, stream_);
  const DeviceTables t =
      batch_.tables(batch, kv.shape().block_size, kv.shape().window_table, stream_);
  defer(
      kRopeStoreKv,
      [=, this] { launch_rope_store_kv(l, q, k, v, n_heads, rope_dim, inv_freq, b, t, stream_); },
      l, q, k, v, n_heads, rope_dim, inv_freq, b, t);
}

void CudaBackend::attention(const KvStorage& kv, int64_t layer, const float* q, int64_t n_heads,
                            const AttentionScores& scores, const Batch& batch, float* out) {
  bind();
  const DeviceKvLayer l = static_cast<const CudaKvStorage&>(kv).layer(layer);
  const DeviceTokens b = batch_.tokens(batch, stream_);
  const DeviceTables t =
      batch_.tables(batch, kv.shape().block_size, kv.shape().window_table, stream_);
  // Chunks of at least kMinTileTokens tokens go to the tensor-core tiles; the rest (decode steps,
  // short chunks) to the per-token kernel.
  constexpr int64_t kMinTileTokens = 16;
  const bool tiles_ok = use_attention_tiles_ && attention_tiles_support(kv.shape().head_dim);
  attention_tiles_.clear();
  attention_singles_.clear();
  int64_t first = 0;
  for (const BatchSequence& seq : batch.sequences) {
    if (tiles_ok && seq.n_tokens >= kMinTileTokens) {
      for (int64_t i = 0; i < seq.n_tokens; i += kAttentionTileQueries) {
        attention_tiles_.push_back(static_cast<int32_t>(first + i));
        attention_tiles_.push_back(
            static_cast<int32_t>(std::min(kAttentionTileQueries, seq.n_tokens - i)));
      }
    } else {
      for (int64_t i = 0; i < seq.n_tokens; ++i) {
        attention_singles_.push_back(static_cast<int32_t>(first + i));
      }
    }
    first += seq.n_tokens;
  }
  const auto n_singles = static_cast<int64_t>(attention_singles_.size());
  if (n_singles > 0) {
    const int32_t* list = n_singles == batch.size()
                              ? nullptr
                              : attention_single_ints_.upload(attention_singles_, stream_);
    int64_t longest = 0;
    for (const int32_t i : attention_singles_) {
      const int64_t keys = int64_t{batch.positions[static_cast<size_t>(i)]} + 1;
      longest = std::max(longest, scores.window > 0 ? std::min(keys, scores.window) : keys);
    }
    const int64_t block_heads = attention_block_heads(l, n_heads, n_singles, group_heads_);
    const int64_t splits =
        split_k_ ? attention_splits(n_singles, block_heads, longest, sm_count_) : 1;
    float* partial = splits > 1 ? attention_scratch(attention_partial_floats(
                                      n_singles, n_heads, kv.shape().head_dim, splits))
                                : nullptr;
    defer(
        kAttention,
        [=, this] {
          launch_attention(l, q, n_heads, scores, b, t, list, n_singles, out, splits, partial,
                           group_heads_, stream_);
        },
        l, q, n_heads, scores, b, t, list, n_singles, out, splits, partial, group_heads_);
  }
  if (!attention_tiles_.empty()) {
    const int32_t* tiles = attention_tile_ints_.upload(attention_tiles_, stream_);
    const auto n_tiles = static_cast<int64_t>(attention_tiles_.size() / 2);
    defer(
        kAttentionTiles,
        [=, this] {
          launch_attention_tiles(l, q, n_heads, scores, b, t, tiles, n_tiles, out, stream_);
        },
        l, q, n_heads, scores, b, t, tiles, n_tiles, out);
  }
}

float* CudaBackend::attention_scratch(int64_t floats) {
  const auto bytes = static_cast<size_t>(floats) * sizeof(float);
  if (attention_partial_.bytes() < bytes) {
    flush(false);  // pending launches may still write the old buffer
    check(cudaStreamSynchronize(stream_), "attention scratch");
    attention_partial_ = DeviceBuffer(std::max(bytes, 2 * attention_partial_.bytes()));
  }
  return static_cast<float*>(attention_partial_.get());
}

void CudaBackend::silu_mul(const float* gate, const float* up, float* out, int64_t rows,
                           int64_t n) {
  bind();
  defer(
      kSiluMul, [=, this] { launch_silu_mul(gate, up, out, rows * n, stream_); }, gate, up, out,
      rows * n);
}

void CudaBackend::gelu_mul(const float* gate, const float* up, float* out, int64_t rows,
                           int64_t n) {
  bind();
  defer(
      kGeluMul, [=, this] { launch_gelu_mul(gate, up, out, rows * n, stream_); }, gate, up, out,
      rows * n);
}

void CudaBackend::scale(float* x, float s, int64_t rows, int64_t n) {
  bind();
  defer(
      kScale, [=, this] { launch_scale(x, s, rows * n, stream_); }, x, s, rows * n);
}

void CudaBackend::softcap(float* x, float cap, int64_t rows, int64_t n) {
  bind();
  defer(
      kSoftcap, [=, this] { launch_softcap(x, cap, rows * n, stream_); }, x, cap, rows * n);
}

void CudaBackend::add(float* y, const float* x, int64_t rows, int64_t n) {
  bind();
  if (fuse_residual_add(y, x, rows * n)) return;
  defer(
      kAdd, [=, this] { launch_add(y, x, rows * n, stream_); }, y, x, rows * n);
}

void CudaBackend::gather_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                              float* out) {
  bind();
  const int32_t* d_rows = gather_rows_.upload(rows, stream_);
  const auto n = static_cast<int64_t>(rows.size());
  defer(
      kGatherRows, [=, this] { launch_gather_rows(x, D, d_rows, n, out, stream_); }, x, D, d_rows,
      n, out);
}

void CudaBackend::scatter_add_rows(const float* x, int64_t D, std::span<const int32_t> rows,
                                   std::span<const float> scales, float* y) {
  bind();
  if (scales.size() != rows.size()) throw Error("cuda scatter_add_rows: rows and scales differ");
  // Rows and scales travel in one upload (the scales as their bits).
  const size_t n = rows.size();
  scatter_packed_.resize(2 * n);
  std::copy(rows.begin(), rows.end(), scatter_packed_.begin());
  std::memcpy(scatter_packed_.data() + n, scales.data(), n * sizeof(float));
  const int32_t* d = scatter_ints_.upload(scatter_packed_, stream_);
  const int32_t* d_rows = d;
  const auto* d_scales = reinterpret_cast<const float*>(d + n);
  const auto n_rows = static_cast<int64_t>(n);
  defer(
      kScatterAdd,
      [=, this] { launch_scatter_add_rows(x, D, d_rows, d_scales, n_rows, y, stream_); }, x, D,
      d_rows, d_scales, n_rows, y);
}

void CudaBackend::zero(float* x, int64_t rows, int64_t n) {
  bind();
  const auto bytes = static_cast<size_t>(rows * n) * sizeof(float);
  defer(
      kZero, [=, this] { check(cudaMemsetAsync(x, 0, bytes, stream_), "zero"); }, x, rows * n);
}

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "the driver reports no devices";
  return n;
}

std::shared_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_shared<CudaBackend>(options);
}

}  // namespace ember::cuda
