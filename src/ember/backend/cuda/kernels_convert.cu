// Conversions feeding cuBLAS: activations f32 -> bf16/f16, and q8_0/q4_0 weights -> bf16 (prefill
// of a quantized model multiplies on the tensor cores; the matrix is expanded once per matmul).
#include "ember/backend/cuda/block_dequant.cuh"
#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return grid_stride_blocks(n, kThreads);
}

__global__ void to_bf16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void to_f16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// One thread per element (grid-stride); runs once per prefill matmul, bandwidth-bound.
__global__ void dequantize_bf16_kernel(WeightMatrix w, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = matrix_element(w, i / w.n_cols, i % w.n_cols);
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

// Block types: one thread per group of 32 values (decoded once, written as 32 bf16).
__global__ void dequantize_groups_bf16_kernel(WeightMatrix w, uint16_t* out, int64_t n_groups) {
  const int64_t groups_per_row = w.n_cols / 32;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_groups;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups_per_row, g = i % groups_per_row;
    float v[32];
    dequantize_group(w.dtype, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, g, v);
    uint16_t* dst = out + r * w.n_cols + 32 * g;
#pragma unroll
    for (int j = 0; j < 32; ++j) dst[j] = __bfloat16_as_ushort(__float2bfloat16_rn(v[j]));
  }
}

}  // namespace

void launch_f32_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("f32_to_bf16");
}

void launch_f32_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_f16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("f32_to_f16");
}

void launch_dequantize_to_bf16(const WeightMatrix& w, uint16_t* out, cudaStream_t s) {
  const int64_t n = w.n_rows * w.n_cols;
  if (n == 0) return;
  if (is_group_dtype(w.dtype)) {
    const int64_t groups = n / 32;
    dequantize_groups_bf16_kernel<<<grid_for(groups), kThreads, 0, s>>>(w, out, groups);
    check_launch("dequantize_to_bf16");
    return;
  }
  dequantize_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(w, out, n);
  check_launch("dequantize_to_bf16");
}

}  // namespace ember::cuda
