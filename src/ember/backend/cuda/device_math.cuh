// Device helpers shared by the kernels: half-precision decoding, warp/block reductions, and reading
// one element of a weight matrix in any layout the backend uploads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/kernels.h"
#include "ember/backend/weight.h"

namespace ember::cuda {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float f16_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Programmatic dependent launch (Hopper): a kernel launched with the programmatic-serialization
// attribute (launch_dependent) may start while the kernel before it in the stream is still
// running, once every block of that one has called pdl_launch_dependents(); it must call
// pdl_wait() before it reads what the earlier kernel wrote or writes what it reads (pdl_wait
// returns once that kernel has finished and its writes are visible). A decode step is a chain of
// short kernels: each one's launch and ramp-up then overlap the previous one's tail. Both are
// no-ops on older GPUs and for kernels launched plainly.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Which launches are programmatic dependents: the matvec kernels (the default: their launch and
// ramp-up overlap the tail of the kernel before; on an H200, same run against none: SmolLM2-shaped
// decode 1.06-1.15x, 8B-shaped 1.01x), every kernel that launch_dependent starts
// (EMBER_CUDA_PDL=all: 0.95-1.04x and 1.00x against none in another run, so not the default), or
// none (EMBER_CUDA_PDL=0).
enum class PdlMode { kNone, kMatvec, kAll };
inline PdlMode pdl_mode() {
  static const PdlMode mode = [] {
    const char* e = std::getenv("EMBER_CUDA_PDL");
    if (e == nullptr) return PdlMode::kMatvec;
    if (std::strcmp(e, "0") == 0) return PdlMode::kNone;
    return std::strcmp(e, "all") == 0 ? PdlMode::kAll : PdlMode::kMatvec;
  }();
  return mode;
}

// `kernel` on `s`, as a programmatic dependent of the kernel before it where pdl_mode() says so
// (`by_default`: the matvec kernels; the others under EMBER_CUDA_PDL=all): it may then start while
// that one drains, so the kernel must call pdl_wait() before it touches memory the earlier one
// uses (all of ours do so first thing, after pdl_launch_dependents()). Launch errors throw naming
// `what`.
template <typename... Params, typename... Args>
void launch_dependent(const char* what, bool by_default, void (*kernel)(Params...), dim3 grid,
                      dim3 block, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = s;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  const PdlMode mode = pdl_mode();
  const bool dependent = mode == PdlMode::kAll || (mode == PdlMode::kMatvec && by_default);
  config.numAttrs = dependent ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), what);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float out = total;
  __syncthreads();  // partial/total may be reused by a following block_sum
  return out;
}

// Blocks of `threads` for a grid-stride loop over n elements (capped: each thread then loops).
inline unsigned grid_stride_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// What every attention kernel reads: the layer's cache, q/out [T, n_heads, head_dim], the score
// rule, the batch, and a list (per-token kernel: token indices or null for all; tile kernel:
// [n_tiles, 2] first token and count).
struct AttentionArgs {
  DeviceKvLayer kv;
  const float* q;
  float* out;
  int32_t n_heads;
  float scale;
  float softcap;
  int64_t window;
  DeviceTokens b;
  DeviceTables tables;
  const int32_t* list;
  // Split-K decode (per-token kernel only): with gridDim.z > 1 splits, each block writes its
  // split's unnormalized output and (max, sum) here, [n_list, n_heads, splits, head_dim + 2], and
  // a second kernel merges them into `out`.
  float* partial = nullptr;
};

// Bytes of one row's quants in the QuantsThenScales layout.
__host__ __device__ inline int64_t quant_bytes_per_row(DType dtype, int64_t cols) {
  return dtype == DType::Q8_0 ? cols : cols / 2;
}

// Element (r, c) of an uploaded matrix as float (embedding lookups; not the matmul path).
__device__ inline float matrix_element(const WeightMatrix& w, int64_t r, int64_t c) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.dtype) {
    case DType::F32:
      return reinterpret_cast<const float*>(base + r * w.row_bytes)[c];
    case DType::F16:
      return f16_bits_to_float(reinterpret_cast<const uint16_t*>(base + r * w.row_bytes)[c]);
    case DType::BF16:
      return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(base + r * w.row_bytes)[c]);
    case DType::Q8_0:
    case DType::Q4_0: {
      const int64_t qb = quant_bytes_per_row(w.dtype, w.n_cols);
      const auto* scales = reinterpret_cast<const uint16_t*>(base + w.n_rows * qb);
      const float d = f16_bits_to_float(scales[r * (w.n_cols / 32) + c / 32]);
      if (w.dtype == DType::Q8_0) return d * static_cast<int8_t>(base[r * qb + c]);
      const int j = static_cast<int>(c % 32);
      const uint8_t byte = base[r * qb + (c / 32) * 16 + (j % 16)];
      return d * static_cast<float>((j < 16 ? (byte & 0x0f) : (byte >> 4)) - 8);
    }
    default:
      return 0.0f;  // the backend uploads no other dtype
  }
}

}  // namespace ember::cuda
